package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay"
)

// The fleet section (--fleet-databases): one relay process over many
// tenant databases, one tenant busy and the others idle, beside a relay
// of that one database in the same run; what the process costs once its
// tenants are parked; and, with --fleet-processes, several processes
// sharing the databases, one killed (fleetkill.go).

// fleetSection is one run of the section.
type fleetSection struct {
	e     *env
	dbs   *fleetDBs
	busy  *sandbox // tenant t000's database, where the paced load commits
	rows  []fleetRow
	idle  idleCost
	kill  killResult
	runID string // the run's hex, in every topic prefix
	// load is the machine's 1-minute load average at the section's start
	// and end: the other work the numbers shared the machine with.
	load [2]string
}

// fleetRow is the busy tenant's commit-to-broker latency under one relay
// set-up, and what its process used meanwhile.
type fleetRow struct {
	name   string
	err    error
	wake   time.Duration // a parked tenant's first event, commit to broker; 0 unless measured
	lat    stats
	cpu    float64 // the process's CPU during the load, % of a core
	rssKB  int64   // its resident memory after the load
	peakKB int64
	conns  connStat
	notes  []string
}

// idleCost is the fleet process over parked tenants only.
type idleCost struct {
	err    error
	window time.Duration
	cpu    float64 // % of a core
	pgCPU  float64 // PostgreSQL's processes meanwhile, % of a core
	rssKB  int64
	conns  connStat
	opened float64 // sessions opened per second on the tenants' databases
	wakes  stats   // parked tenants woken at once: each one's event, commit to broker
	woken  int     // how many were
}

func measureFleet(ctx context.Context, e *env) (*fleetSection, error) {
	n := e.cfg.FleetDatabases
	e.progress("making %d tenant databases", n)
	dbs, err := newFleetDBs(ctx, e, n)
	if err != nil {
		return nil, err
	}
	defer dbs.drop()
	e.progress("%d databases made in %s", n, dbs.created.Round(100*time.Millisecond))
	fs := &fleetSection{e: e, dbs: dbs, runID: strings.TrimPrefix(dbs.prefix, "bench_fleet_")}
	fs.load[0] = loadAverage()
	defer func() { fs.load[1] = loadAverage() }()
	db, client, err := dbs.open(dbs.tenants[0], 16)
	if err != nil {
		return nil, err
	}
	closeBusy := sync.OnceFunc(func() { client.Close() })
	defer closeBusy()
	fs.busy = &sandbox{name: dbs.database(dbs.tenants[0]), url: dbs.url(dbs.database(dbs.tenants[0])), db: db, client: client}

	poll := e.cfg.PollInterval
	if poll == 0 {
		poll = relay.DefaultPollInterval
	}
	fs.rows = append(fs.rows,
		fs.singleRow(ctx, "single-database relay, LISTEN (its default)", false),
		fs.fleetRow(ctx, fmt.Sprintf("fleet of %d databases, --fleet-listen", n), "b1", false, "--fleet-listen"),
		fs.singleRow(ctx, fmt.Sprintf("single-database relay, --poll-only, polling every %s", poll), true),
		fs.fleetRow(ctx, fmt.Sprintf("fleet of %d databases, polling every %s (its default)", n, poll), "b2", true))
	if e.cfg.FleetBacklog > 0 && n > 1 && ctx.Err() == nil {
		fs.rows = append(fs.rows, fs.backlogRow(ctx, fmt.Sprintf("the same fleet, tenant %s while %s drains %d events",
			dbs.tenants[1], dbs.tenants[0], e.cfg.FleetBacklog)))
	}
	closeBusy() // its connections, idle from now on, would count against the server's
	if e.cfg.FleetProcesses > 1 && ctx.Err() == nil {
		fs.kill = fs.killRow(ctx)
	}
	return fs, ctx.Err()
}

// singleRow is the paced load under `entoutbox relay --database-url` on
// the busy tenant's database alone.
func (fs *fleetSection) singleRow(ctx context.Context, name string, pollOnly bool) (row fleetRow) {
	e := fs.e
	row.name = name
	key := "a1"
	if pollOnly {
		key = "a2"
	}
	prefix := fs.dbs.prefix + "_" + key + "_"
	e.progress("== fleet: %s", name)
	recv, err := newReceiver(ctx, e.cfg.Broker, prefix+"profiles")
	if err != nil {
		row.err = err
		return row
	}
	defer recv.close()
	app := "entoutbox relay " + fs.runID
	args := []string{"relay", "--database-url", withApplicationName(fs.busy.url, app), "--broker", e.cfg.Broker,
		"--path", "fast", "--topic-prefix", prefix, "--log-level", "error"}
	if pollOnly {
		args = append(args, "--poll-only")
	}
	rs := &relaySet{exited: make(chan struct{})}
	if err := rs.start(e.bin, append(args, e.tuningFlags()...)); err != nil {
		row.err = err
		return row
	}
	defer func() {
		if err := rs.stop(); err != nil {
			row.notes = append(row.notes, err.Error())
		}
	}()
	// Its first event waits for the relay to start: not measured.
	if _, err := fs.firstEvent(ctx, recv, rs); err != nil {
		row.err = err
		return row
	}
	fs.busyLoad(ctx, &row, recv, rs, rs.procs[0].cmd.Process.Pid, app)
	return row
}

// fleetRow is the paced load on the busy tenant under one fleet process
// over every tenant, started with extra flags; with idle, the idle cost
// is measured after it, once every tenant is parked again.
func (fs *fleetSection) fleetRow(ctx context.Context, name, key string, idle bool, extra ...string) (row fleetRow) {
	e := fs.e
	row.name = name
	e.progress("== fleet: %s", name)
	prefix := fs.dbs.prefix + "_" + key + "_"
	recv, err := newReceiver(ctx, e.cfg.Broker, prefix+"profiles")
	if err != nil {
		row.err = err
		return row
	}
	defer recv.close()
	f, err := startFleet(e, fs.dbs, prefix, 1, extra...)
	if err != nil {
		row.err = err
		return row
	}
	defer func() {
		if err := f.rs.stop(); err != nil {
			row.notes = append(row.notes, err.Error())
		}
		if logged := f.loggedProblems(); logged != "" {
			row.notes = append(row.notes, logged)
		}
	}()
	n := len(fs.dbs.tenants)
	if err := f.waitTenants(ctx, "parked", n, e.cfg.Timeout); err != nil {
		row.err = fmt.Errorf("the fleet did not start with its tenants parked: %w", err)
		return row
	}
	// The busy tenant starts parked: its first event waits for a probe
	// and its relay's start.
	if row.wake, err = fs.firstEvent(ctx, recv, f.rs); err != nil {
		row.err = err
		return row
	}
	fs.busyLoad(ctx, &row, recv, f.rs, f.pid(0), f.apps[0])
	if idle && row.err == nil {
		fs.idle = fs.idleCost(ctx, f)
		if fs.idle.err == nil {
			fs.idle.wakes, fs.idle.woken, fs.idle.err = fs.wakeMany(ctx, f, recv, wakeTenants)
		}
	}
	return row
}

// firstEvent commits one event in the busy tenant and returns how long it
// took to arrive.
func (fs *fleetSection) firstEvent(ctx context.Context, recv *receiver, rs *relaySet) (time.Duration, error) {
	return fs.firstEventOf(ctx, fs.busy, recv, rs)
}

// firstEventOf commits one event in sb's tenant and returns how long it
// took to arrive.
func (fs *fleetSection) firstEventOf(ctx context.Context, sb *sandbox, recv *receiver, rs *relaySet) (time.Duration, error) {
	id := uuid.Must(uuid.NewV7()).String()
	err := sb.client.WithTx(ctx, func(tx *testent.Tx) error { return emitOne(ctx, tx, id, 0, 1) })
	if err != nil {
		return 0, fmt.Errorf("committing the first event: %w", err)
	}
	committed := time.Now()
	if missing := recv.await(ctx, []string{id}, fs.e.cfg.Timeout, rs.failed()); missing > 0 {
		if err := rs.err(); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("the first event did not arrive within %s", fs.e.cfg.Timeout)
	}
	at, _ := recv.receivedAt(id)
	return max(0, at.Sub(committed)), nil
}

// busyLoad runs the paced load on the busy tenant and records its
// latencies and what process pid, whose connections are named app, used
// meanwhile.
func (fs *fleetSection) busyLoad(ctx context.Context, row *fleetRow, recv *receiver, rs *relaySet, pid int, app string) {
	fs.loadOn(ctx, fs.busy, row, recv, rs, pid, app)
}

// loadOn runs the paced load on sb's tenant, as busyLoad on the busy one.
func (fs *fleetSection) loadOn(ctx context.Context, sb *sandbox, row *fleetRow, recv *receiver, rs *relaySet, pid int, app string) {
	e := fs.e
	conns := watchApps(e.admin, app)
	meter := meterProc(pid)
	var res result
	row.lat = e.latencyPhase(ctx, sb, recv, rs, paced{rate: e.cfg.Rate, perTx: 1, workers: 16}, e.cfg.LatencyDuration, nil, &res, "latency")
	row.cpu = meter.pct()
	row.conns = conns.finish(app)
	row.rssKB, _ = procStatusKB(pid, "VmRSS")
	row.peakKB, _ = procStatusKB(pid, "VmHWM")
	row.notes = append(row.notes, res.notes...)
	if err := rs.err(); err != nil {
		row.err = err
	}
	if n := recv.duplicateCount(); n > 0 {
		row.notes = append(row.notes, fmt.Sprintf("%d duplicate deliveries", n))
	}
}

// idleCost waits until every tenant is parked again, the busy one
// included, and measures the process over --fleet-idle-window.
func (fs *fleetSection) idleCost(ctx context.Context, f *fleetRun) idleCost {
	e := fs.e
	c := idleCost{window: e.cfg.FleetIdleWindow}
	e.progress("waiting for the busy tenant to be parked (--fleet-idle-after %s)", e.cfg.FleetIdleAfter)
	if err := f.waitTenants(ctx, "parked", len(fs.dbs.tenants), e.cfg.FleetIdleAfter+e.cfg.Timeout); err != nil {
		c.err = err
		return c
	}
	e.progress("idle: measuring the fleet over %d parked tenants for %s", len(fs.dbs.tenants), c.window)
	sessionsFrom, err := fs.dbs.sessions(ctx)
	if err != nil {
		c.err = err
		return c
	}
	conns := watchApps(e.admin, f.apps[0])
	meter, cpuFrom := meterProc(f.pid(0)), sampleCPU([]int{f.pid(0)})
	select {
	case <-time.After(c.window):
	case <-f.rs.failed():
	case <-ctx.Done():
	}
	c.cpu = meter.pct()
	cpuTo := sampleCPU([]int{f.pid(0)})
	c.conns = conns.finish(f.apps[0])
	c.rssKB, _ = procStatusKB(f.pid(0), "VmRSS")
	if err := f.rs.err(); err != nil {
		c.err = err
		return c
	}
	c.pgCPU = -1
	if wall := cpuTo.at.Sub(cpuFrom.at); cpuFrom.ok && cpuTo.ok && wall > 0 {
		c.pgCPU = 100 * float64(groupCPU(cpuFrom, cpuTo, "PostgreSQL")) / float64(wall)
	}
	// The probes' sessions are counted when they end: give the last
	// ones a moment.
	time.Sleep(time.Second)
	sessionsTo, err := fs.dbs.sessions(ctx)
	if err != nil {
		c.err = err
		return c
	}
	c.opened = float64(sessionsTo-sessionsFrom) / (c.window + time.Second).Seconds()
	return c
}

// wakeTenants is how many parked tenants the idle phase wakes at once.
const wakeTenants = 10

// wakeMany commits one event in each of up to k parked tenants at once,
// spread over the tenants, the busy one apart, and returns how long each
// took to arrive: a probe round reads the databases one after another.
func (fs *fleetSection) wakeMany(ctx context.Context, f *fleetRun, recv *receiver, k int) (stats, int, error) {
	n := len(fs.dbs.tenants)
	k = min(k, n-1)
	if k <= 0 {
		return stats{}, 0, nil
	}
	fs.e.progress("waking %d parked tenants at once", k)
	ids := make([]string, k)
	committed := make([]time.Time, k)
	errs := make(chan error, k)
	for i := range k {
		go func() {
			errs <- func() error {
				_, client, err := fs.dbs.open(fs.dbs.tenants[1+i*(n-1)/k], 1)
				if err != nil {
					return err
				}
				defer client.Close()
				ids[i] = uuid.Must(uuid.NewV7()).String()
				err = client.WithTx(ctx, func(tx *testent.Tx) error { return emitOne(ctx, tx, ids[i], 0, 1) })
				committed[i] = time.Now()
				return err
			}()
		}()
	}
	for range k {
		if err := <-errs; err != nil {
			return stats{}, 0, fmt.Errorf("committing an event in a parked tenant: %w", err)
		}
	}
	if missing := recv.await(ctx, ids, fs.e.cfg.Timeout, f.rs.failed()); missing > 0 {
		if err := f.rs.err(); err != nil {
			return stats{}, 0, err
		}
		return stats{}, 0, fmt.Errorf("%d of %d woken tenants' events did not arrive within %s", missing, k, fs.e.cfg.Timeout)
	}
	ds := make([]time.Duration, k)
	for i, id := range ids {
		at, _ := recv.receivedAt(id)
		ds[i] = max(0, at.Sub(committed[i]))
	}
	return summarize(ds), k, nil
}

// loadAverage is the 1-minute load average, "-" where /proc has none.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "-"
}

// print writes the section's table and lines.
func (fs *fleetSection) print(out io.Writer) error {
	cfg := fs.e.cfg
	n := len(fs.dbs.tenants)
	fmt.Fprintf(out, "\nfleet: %d tenant databases on this server, made in %s (copies of one migrated template); "+
		"tenant %s busy at %d events/s for %s (one event per transaction), the other %d idle; fast path; "+
		"--fleet-idle-after %s\n", n, fs.dbs.created.Round(100*time.Millisecond), fs.dbs.tenants[0], cfg.Rate,
		cfg.LatencyDuration, n-1, cfg.FleetIdleAfter)
	fmt.Fprintf(out, "machine load average (1 min) %s at the start, %s at the end, on %d CPUs\n", fs.load[0], fs.load[1], runtime.NumCPU())
	tw := tabwriter.NewWriter(out, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "busy tenant's relay\twake\tp50\tp99\tmax\tCPU of a core\tRSS / peak\tconnections max / mean\tnotes")
	for _, r := range fs.rows {
		if r.err != nil {
			fmt.Fprintf(tw, "%s%s\tn/a (%s)\n", r.name, strings.Repeat("\tn/a", 7), firstLine(r.err))
			continue
		}
		wake := "-"
		if r.wake > 0 {
			wake = fmtDur(r.wake, 1)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s / %s\t%s\t%s\n", r.name, wake, fmtDur(r.lat.p50, r.lat.n),
			fmtDur(r.lat.p99, r.lat.n), fmtDur(r.lat.max, r.lat.n), fmtPct(r.cpu), fmtMB(r.rssKB), fmtMB(r.peakKB),
			r.conns, strings.Join(r.notes, "; "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "  wake: a parked tenant's first event, commit to broker (the next probe, then its relay's start); "+
		"CPU, RSS and connections: the relay process during the load (connections sampled every 100 ms, across every database)")
	fs.idle.print(out, n, cfg.FleetIdleAfter)
	fs.kill.print(out)
	return nil
}

func (c idleCost) print(out io.Writer, n int, idleAfter time.Duration) {
	if c.err != nil {
		fmt.Fprintf(out, "idle: n/a (%s)\n", firstLine(c.err))
		return
	}
	if c.window == 0 {
		return
	}
	probe := "-"
	if c.opened > 0 {
		probe = fmtDur(time.Duration(float64(n)/c.opened*float64(time.Second)), 1)
	}
	fmt.Fprintf(out, "idle: the fleet process over %d parked tenants (all parked %s after their last event), over %s: "+
		"CPU %s of a core, RSS %s, connections held %s (max / mean); the prober opened %.0f sessions/s on the tenants' "+
		"databases (each database read every %s); PostgreSQL meanwhile %s of a core (all its processes, other clients' too)\n",
		n, idleAfter, c.window, fmtPct(c.cpu), fmtMB(c.rssKB), c.conns, c.opened, probe, fmtPct(c.pgCPU))
	if c.woken > 0 {
		fmt.Fprintf(out, "wake: %d parked tenants given one event each at once: commit to broker p50 %s, max %s\n",
			c.woken, fmtDur(c.wakes.p50, c.wakes.n), fmtDur(c.wakes.max, c.wakes.n))
	}
}
