package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/internal/testent"
)

// The fleet section's last row (--fleet-processes): several fleet
// processes share the tenants through a members database
// (--fleet-database-url), each tenant relayed by one of them; load goes
// to --fleet-busy tenants, and the process relaying the most of them is
// killed (SIGKILL, as a crash). Its busy tenants go quiet until the
// others see it gone (--fleet-member-timeout) and its relays' partition
// leases lapse (--lease); the row measures that gap per tenant, and that
// every event emitted arrived.

// killResult is what the row measured.
type killResult struct {
	ran      bool
	err      error
	procs    int
	busy     int
	rate     int      // events/s per busy tenant
	killed   int      // index of the process killed, from 1
	owned    []string // the busy tenants whose databases it had connections to
	recovery []time.Duration
	// unrecovered is the owned tenants none of whose events committed
	// after the kill arrived.
	unrecovered int
	emitted     int
	lost        int
	duplicates  int
	preKill     time.Duration
	flags       string // the processes' member timeout and lease, as given
	notes       []string
}

// tenantEmitter commits events into one busy tenant at a steady rate and
// records each with the time its commit returned.
type tenantEmitter struct {
	tenant    string
	client    *testent.Client
	mu        sync.Mutex
	ids       []string
	committed []time.Time
	err       error
}

// run emits rate events/s until ctx ends.
func (t *tenantEmitter) run(ctx context.Context, rate int) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		id := uuid.Must(uuid.NewV7()).String()
		err := t.client.WithTx(ctx, func(tx *testent.Tx) error { return emitOne(ctx, tx, id, i, 100) })
		at := time.Now()
		t.mu.Lock()
		if err != nil && ctx.Err() == nil && t.err == nil {
			t.err = fmt.Errorf("tenant %s: committing an event: %w", t.tenant, err)
		} else if err == nil {
			t.ids, t.committed = append(t.ids, id), append(t.committed, at)
		}
		t.mu.Unlock()
	}
}

// since is the ids committed after at.
func (t *tenantEmitter) since(at time.Time) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	i, _ := slices.BinarySearchFunc(t.committed, at, func(c, at time.Time) int { return c.Compare(at) })
	return slices.Clone(t.ids[i:])
}

// firstArrival is the earliest arrival of ids, false when none arrived.
func firstArrival(recv *receiver, ids []string) (time.Time, bool) {
	var first time.Time
	for _, id := range ids {
		if at, ok := recv.receivedAt(id); ok && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first, !first.IsZero()
}

func (fs *fleetSection) killRow(ctx context.Context) killResult {
	e := fs.e
	r := killResult{ran: true, procs: e.cfg.FleetProcesses, preKill: max(5*time.Second, e.cfg.LatencyDuration)}
	r.flags = "--fleet-member-timeout and --lease their defaults"
	if len(fs.killFlags("")) > 2 {
		r.flags = strings.Join(fs.killFlags("")[2:], " ")
	}
	e.progress("== fleet: %d processes sharing %d databases, one killed", r.procs, len(fs.dbs.tenants))
	if r.err = fs.killRun(ctx, &r); r.err != nil && ctx.Err() != nil {
		r.err = ctx.Err()
	}
	return r
}

// killRun starts the processes, loads the busy tenants, kills one and
// waits for its tenants' events.
func (fs *fleetSection) killRun(ctx context.Context, r *killResult) error {
	e, n := fs.e, len(fs.dbs.tenants)
	members := fs.dbs.prefix + "_members"
	if _, err := e.admin.ExecContext(ctx, `CREATE DATABASE `+pgsql.QuoteIdent(members)); err != nil {
		return fmt.Errorf("creating the members database: %w", err)
	}
	prefix := fs.dbs.prefix + "_c_"
	recv, err := newReceiver(ctx, e.cfg.Broker, prefix+"profiles")
	if err != nil {
		return err
	}
	defer recv.close()
	f, err := startFleet(e, fs.dbs, prefix, r.procs, fs.killFlags(members)...)
	if err != nil {
		return err
	}
	defer func() {
		if err := f.rs.stop(); err != nil {
			r.notes = append(r.notes, err.Error())
		}
		if logged := f.loggedProblems(); logged != "" {
			r.notes = append(r.notes, logged)
		}
	}()
	// Settled: every process sees the others, so that each tenant is
	// someone else's in all but one.
	if err := f.waitTenants(ctx, "elsewhere", (r.procs-1)*n, e.cfg.Timeout); err != nil {
		return fmt.Errorf("the processes did not divide the tenants: %w", err)
	}
	emitters, err := fs.openEmitters(e.cfg.FleetBusy)
	if err != nil {
		return err
	}
	defer func() {
		for _, t := range emitters {
			t.client.Close()
		}
	}()
	r.busy, r.rate = len(emitters), e.cfg.FleetBusyRate
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, t := range emitters {
		wg.Go(func() { t.run(loadCtx, e.cfg.FleetBusyRate) })
	}
	defer func() { stopLoad(); wg.Wait() }()
	server := watchServer(e.admin)
	defer func() {
		if s := server.finish(); s != "" {
			r.notes = append(r.notes, s)
		}
	}()
	e.progress("load: %d tenants at %d events/s each; killing a process in %s", r.busy, e.cfg.FleetBusyRate, r.preKill)
	if err := sleepCtx(ctx, r.preKill, f.rs.failed()); err != nil {
		return err
	}
	return fs.killAndWatch(ctx, r, f, recv, emitters, func() { stopLoad(); wg.Wait() })
}

// killFlags is the flags of the row's processes.
func (fs *fleetSection) killFlags(members string) []string {
	cfg := fs.e.cfg
	out := []string{"--fleet-database-url", fs.dbs.url(members)}
	if cfg.FleetMemberTimeout > 0 {
		out = append(out, "--fleet-member-timeout", cfg.FleetMemberTimeout.String())
	}
	if cfg.FleetLease > 0 {
		out = append(out, "--lease", cfg.FleetLease.String())
	}
	return out
}

// openEmitters opens a one-connection pool on each of busy tenants spread
// over the run's tenants.
func (fs *fleetSection) openEmitters(busy int) ([]*tenantEmitter, error) {
	n := len(fs.dbs.tenants)
	busy = min(busy, n)
	var out []*tenantEmitter
	for i := range busy {
		t := fs.dbs.tenants[i*n/busy]
		_, client, err := fs.dbs.open(t, 1)
		if err != nil {
			for _, o := range out {
				o.client.Close()
			}
			return nil, err
		}
		out = append(out, &tenantEmitter{tenant: t, client: client})
	}
	return out, nil
}

// killAndWatch kills the process with the most busy tenants, keeps the
// load on until each of them has an event committed after the kill at
// the broker (or --timeout), stops the load and counts what arrived.
func (fs *fleetSection) killAndWatch(ctx context.Context, r *killResult, f *fleetRun, recv *receiver,
	emitters []*tenantEmitter, stopLoad func()) error {
	e := fs.e
	victim, owned, err := fs.busiestProcess(ctx, f, emitters)
	if err != nil {
		return err
	}
	r.killed = victim + 1
	for _, t := range owned {
		r.owned = append(r.owned, t.tenant)
	}
	e.progress("killing process %d, which relays %d of the busy tenants", r.killed, len(owned))
	if err := f.rs.kill(victim); err != nil {
		return err
	}
	killedAt := time.Now()
	deadline := killedAt.Add(e.cfg.Timeout)
	for time.Now().Before(deadline) && !allRecovered(recv, owned, killedAt) {
		if err := sleepCtx(ctx, 100*time.Millisecond, f.rs.failed()); err != nil {
			return err
		}
	}
	// A little more load, relayed as usual by the survivors.
	if err := sleepCtx(ctx, 2*time.Second, f.rs.failed()); err != nil {
		return err
	}
	stopLoad()
	var ids []string
	for _, t := range emitters {
		if t.err != nil {
			r.notes = append(r.notes, t.err.Error())
		}
		ids = append(ids, t.ids...)
	}
	r.emitted = len(ids)
	r.lost = recv.await(ctx, ids, e.cfg.Timeout, f.rs.failed())
	if err := f.rs.err(); err != nil {
		return err
	}
	r.duplicates = recv.duplicateCount()
	for _, t := range owned {
		if at, ok := firstArrival(recv, t.since(killedAt)); ok {
			r.recovery = append(r.recovery, at.Sub(killedAt))
		} else {
			r.unrecovered++
		}
	}
	return nil
}

// allRecovered tells whether each of tenants has an event committed
// after at that arrived.
func allRecovered(recv *receiver, tenants []*tenantEmitter, at time.Time) bool {
	for _, t := range tenants {
		if _, ok := firstArrival(recv, t.since(at)); !ok {
			return false
		}
	}
	return true
}

// busiestProcess is the process holding connections to the most busy
// tenants' databases, sampled over a second, and those tenants: a busy
// tenant's running relay holds connections to its database, a parked
// one none. It samples again, for up to 30 s, while some busy tenant has
// no relay yet (a parked tenant waits for its process's probe round).
func (fs *fleetSection) busiestProcess(ctx context.Context, f *fleetRun, emitters []*tenantEmitter) (int, []*tenantEmitter, error) {
	var held []map[*tenantEmitter]bool
	for deadline := time.Now().Add(30 * time.Second); ; {
		var err error
		if held, err = fs.whoRelays(ctx, f, emitters); err != nil {
			return 0, nil, err
		}
		relayed := map[*tenantEmitter]bool{}
		for _, h := range held {
			maps.Copy(relayed, h)
		}
		if len(relayed) == len(emitters) || time.Now().After(deadline) {
			break
		}
	}
	counts := make([]string, len(held))
	for i := range held {
		counts[i] = fmt.Sprintf("process %d: %d", i+1, len(held[i]))
	}
	relayed := map[*tenantEmitter]bool{}
	for _, h := range held {
		maps.Copy(relayed, h)
	}
	counts = append(counts, fmt.Sprintf("none: %d", len(emitters)-len(relayed)))
	fs.e.progress("busy tenants whose database each process holds connections to: %s", strings.Join(counts, ", "))
	victim := 0
	for i := range held {
		if len(held[i]) > len(held[victim]) {
			victim = i
		}
	}
	if len(held[victim]) == 0 {
		return 0, nil, fmt.Errorf("no process holds a connection to a busy tenant's database")
	}
	var owned []*tenantEmitter
	for _, t := range emitters { // in the emitters' order
		if held[victim][t] {
			owned = append(owned, t)
		}
	}
	return victim, owned, nil
}

// whoRelays is, per process, the busy tenants whose database it held
// connections to in ten samples over a second.
func (fs *fleetSection) whoRelays(ctx context.Context, f *fleetRun, emitters []*tenantEmitter) ([]map[*tenantEmitter]bool, error) {
	byDB := map[string]*tenantEmitter{}
	for _, t := range emitters {
		byDB[fs.dbs.database(t.tenant)] = t
	}
	held := make([]map[*tenantEmitter]bool, len(f.apps))
	for i := range held {
		held[i] = map[*tenantEmitter]bool{}
	}
	for range 10 {
		rows, err := fs.e.admin.QueryContext(ctx, `SELECT DISTINCT application_name, datname FROM pg_stat_activity
			WHERE left(datname, length($1)) = $1`, fs.dbs.prefix)
		if err != nil {
			return nil, fmt.Errorf("reading which process relays which tenant: %w", err)
		}
		for rows.Next() {
			var app, db string
			if rows.Scan(&app, &db) != nil {
				continue
			}
			if i := slices.Index(f.apps, app); i >= 0 && byDB[db] != nil {
				held[i][byDB[db]] = true
			}
		}
		rows.Close()
		if err := sleepCtx(ctx, 100*time.Millisecond, f.rs.failed()); err != nil {
			return nil, err
		}
	}
	return held, nil
}

// sleepCtx waits d, and fails early when ctx ends or abort is closed.
func sleepCtx(ctx context.Context, d time.Duration, abort <-chan struct{}) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-abort:
		return fmt.Errorf("a fleet process ended by itself")
	}
}

func (r killResult) print(out io.Writer) {
	if !r.ran {
		return
	}
	head := fmt.Sprintf("kill: %d fleet processes sharing the tenants (--fleet-database-url, %s)", r.procs, r.flags)
	if r.err != nil {
		fmt.Fprintf(out, "%s: n/a (%s)\n", head, firstLine(r.err))
		return
	}
	fmt.Fprintf(out, "%s, %d busy tenants at %d events/s each; process %d, relaying %d of them, SIGKILLed after %s of load:\n",
		head, r.busy, r.rate, r.killed, len(r.owned), r.preKill)
	rec := slices.Clone(r.recovery)
	slices.Sort(rec)
	s := "none relayed again"
	if len(rec) > 0 {
		s = fmt.Sprintf("p50 %s, max %s", fmtDur(percentile(rec, 0.5), 1), fmtDur(rec[len(rec)-1], 1))
	}
	fmt.Fprintf(out, "  its tenants relayed again (kill to the first event committed after it at the broker, per tenant): %s", s)
	if r.unrecovered > 0 {
		fmt.Fprintf(out, "; %d tenants not relayed again", r.unrecovered)
	}
	fmt.Fprintf(out, "\n  %d events emitted, %d lost, %d duplicates at the broker\n", r.emitted, r.lost, r.duplicates)
	for _, n := range r.notes {
		fmt.Fprintf(out, "  %s\n", n)
	}
}
