package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/relay"
	"github.com/entoutbox/entoutbox/schema"
)

// rowSpec is one row of the table: a relay path and how many replicas of
// it run on the same table.
type rowSpec struct {
	key      string
	name     string
	path     string
	replicas int
	bin      string // the entoutbox command its relays run; "" for the env's
	// waiting is how many scheduled events, due days ahead, wait in the
	// scheduled table while the row runs (--scheduled-waiting).
	waiting int
	// lateness makes the row of the scheduled section: after the drain,
	// the lateness of scheduled deliveries instead of the latency loads.
	lateness bool
	// flags are more flags of its relays.
	flags []string
	// latencyOnly leaves out, after the drain, the near-limit load and the
	// load while transactions are held open: the paced load at --rate
	// alone (the retention section).
	latencyOnly bool
}

// logged tells whether the row's relays keep a delivered log.
func (s rowSpec) logged() bool { return slices.Contains(s.flags, "--delivered-log") }

// withBaseline puts before each row the same row run by the baseline
// command (--baseline-bin), so that a change is measured side by side with
// what it changed, in one run, on one machine state.
func withBaseline(specs []rowSpec, baseline string) []rowSpec {
	if baseline == "" {
		return specs
	}
	out := make([]rowSpec, 0, 2*len(specs))
	for _, s := range specs {
		b := s
		b.name, b.bin = s.name+" (baseline build)", baseline
		out = append(out, b, s)
	}
	return out
}

var knownRows = []rowSpec{
	{key: "compatible", name: "stock watermill-sql + forwarder", path: "compatible", replicas: 1},
	{key: "fast", name: "entoutbox fast, 1 replica", path: "fast", replicas: 1},
	{key: "fast3", name: "entoutbox fast, 3 replicas", path: "fast", replicas: 3},
	{key: "fastlog", name: "entoutbox fast, 1 replica, delivered log", path: "fast", replicas: 1, flags: []string{"--delivered-log"}},
	{key: "wal", name: "entoutbox WAL (logical replication)", path: "wal", replicas: 1},
}

// scheduledSection is the --paths key of the scheduled section.
const scheduledSection = "scheduled"

// rowSpecs is the rows keys name, each with waiting scheduled events
// waiting; the scheduled section's key stands for its rows (see
// scheduledSpecs), which wait sectionWaiting in their second row.
func rowSpecs(keys []string, waiting, sectionWaiting int) ([]rowSpec, error) {
	var out []rowSpec
	for _, k := range keys {
		if k == scheduledSection {
			out = append(out, scheduledSpecs(sectionWaiting)...)
			continue
		}
		i := slices.IndexFunc(knownRows, func(r rowSpec) bool { return r.key == k })
		if i < 0 {
			return nil, fmt.Errorf("--paths: unknown row %q (want compatible, fast, fast3, fastlog, wal or scheduled)", k)
		}
		r := knownRows[i]
		r.waiting = waiting
		out = append(out, r)
	}
	return out, nil
}

// result is one row's measurements. err means the row could not run at
// all; a phase that failed later leaves its cells empty and says why in
// notes.
type result struct {
	name      string
	err       error
	drainRate float64 // events/s
	latency   stats   // paced load
	near      stats   // paced load near the drain limit
	nearRate  int     // its events/s
	nearCPU   string  // where its CPU went, per event
	held      stats   // paced load while transactions are held open
	peakKB    int64
	drainCPU  string   // where the drain's CPU went, per event
	lateness  bool     // a row of the scheduled section
	late      lateness // its lateness of scheduled deliveries
	// retainedIn is how long inserting the retained rows took (--retained).
	retainedIn time.Duration
	emitted    int // events the row emitted into the outbox, drain and loads
	received   int // distinct events that arrived on the row's topic
	notes      []string
}

func (r *result) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// stats summarises commit-to-receive latencies.
type stats struct {
	n             int
	p50, p99, max time.Duration
}

func summarize(ds []time.Duration) stats {
	if len(ds) == 0 {
		return stats{}
	}
	slices.Sort(ds)
	return stats{n: len(ds), p50: percentile(ds, 0.50), p99: percentile(ds, 0.99), max: ds[len(ds)-1]}
}

// percentile is the nearest-rank percentile of sorted ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	i := int(p*float64(len(ds))+0.999999) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

// measureRow runs one row from a fresh schema to its teardown.
func measureRow(ctx context.Context, e *env, spec rowSpec) result {
	res := result{name: spec.name, lateness: spec.lateness}
	if err := e.measure(ctx, spec, &res); err != nil {
		res.err = err
	}
	return res
}

func (e *env) measure(ctx context.Context, spec rowSpec, res *result) error {
	cfg := e.cfg
	s, err := newSandbox(ctx, e)
	if err != nil {
		return err
	}
	defer s.close()
	prefix := s.name + "_"
	recv, err := newReceiver(ctx, cfg.Broker, prefix+"profiles")
	if err != nil {
		return fmt.Errorf("subscribing: %w", err)
	}
	defer recv.close()
	if err := e.prepare(ctx, s, spec, prefix, res); err != nil {
		return err
	}

	// Drain: everything is committed before the relay starts.
	e.progress("emitting %d events with no relay running", cfg.Events)
	ids, _, err := prefill(ctx, s.client, cfg.Events, cfg.Aggregates)
	if err != nil {
		return err
	}
	res.emitted += len(ids)
	e.progress("starting %d %s relay(s), draining", spec.replicas, spec.path)
	start := time.Now()
	rs, err := startRelays(e, s, spec.bin, spec.path, prefix, spec.replicas, spec.flags...)
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = rs.stop()
		}
	}()
	if err := e.profiledDrain(ctx, s, spec, recv, rs, ids, start, res); err != nil {
		return err
	}

	if spec.lateness {
		e.progress("scheduled load: %d events/s due for %s, each emitted %s ahead", cfg.Rate, cfg.LatencyDuration, scheduledLead)
		res.late = e.latenessPhase(ctx, s, recv, rs, res)
		return e.finishRow(recv, rs, res, &stopped)
	}
	if spec.latencyOnly {
		e.progress("paced load: %d events/s for %s", cfg.Rate, cfg.LatencyDuration)
		res.latency = e.latencyPhase(ctx, s, recv, rs, paced{rate: cfg.Rate, perTx: 1, workers: 16}, cfg.LatencyDuration, nil, res, "latency")
		return e.finishRow(recv, rs, res, &stopped)
	}
	e.pacedPhases(ctx, s, recv, rs, res)
	return e.finishRow(recv, rs, res, &stopped)
}

// prepare fills the empty sandbox with what the row waits beside (scheduled
// events, retained rows) and probes its relays.
func (e *env) prepare(ctx context.Context, s *sandbox, spec rowSpec, prefix string, res *result) error {
	cfg := e.cfg
	// Before the probe, so that a WAL relay's slot, made then, does not
	// decode them: scheduled over days, they would have been decoded long
	// before.
	if spec.waiting > 0 {
		e.progress("inserting %d scheduled events due days ahead", spec.waiting)
		if err := s.fillScheduled(ctx, spec.waiting, cfg.Aggregates); err != nil {
			return err
		}
	}
	// A relay that cannot run at all (an unknown --path) exits at once: find
	// out before spending time on emitting.
	if err := e.probe(s, spec, prefix); err != nil {
		return err
	}
	if cfg.Retained > 0 {
		e.progress("inserting %d retained delivered rows", cfg.Retained)
		var err error
		if res.retainedIn, err = s.retain(ctx, cfg.Retained, cfg.Aggregates, spec.path == string(relay.PathCompatible), spec.logged()); err != nil {
			return err
		}
		e.progress("inserted them in %s", res.retainedIn.Round(time.Millisecond))
	}
	return nil
}

// profiledDrain drains as drain does, profiling the first relay meanwhile
// when --relay-profile asks.
func (e *env) profiledDrain(ctx context.Context, s *sandbox, spec rowSpec, recv *receiver, rs *relaySet, ids []string,
	start time.Time, res *result) error {
	cfg := e.cfg
	cpuFrom := sampleCPU(rs.pids())
	var profiled <-chan error
	if cfg.RelayProfile != "" {
		path := cfg.RelayProfile + "." + spec.key + ".pprof"
		e.progress("profiling the first relay for %s into %s (its /metrics and /debug/pprof/ on %s)", cfg.ProfileFor, path, rs.pprofAddr)
		profiled = rs.profile(cfg.ProfileFor, path)
	}
	if err := e.drain(ctx, s, spec, recv, rs, ids, start, cpuFrom, res); err != nil {
		return err
	}
	if profiled != nil {
		if err := <-profiled; err != nil {
			res.note("profile: %v", err)
		}
	}
	return nil
}

// pacedPhases measures the latencies of a paced load, of one near the
// drain limit and of one while transactions are held open.
func (e *env) pacedPhases(ctx context.Context, s *sandbox, recv *receiver, rs *relaySet, res *result) {
	cfg := e.cfg
	e.progress("paced load: %d events/s for %s", cfg.Rate, cfg.LatencyDuration)
	res.latency = e.latencyPhase(ctx, s, recv, rs, paced{rate: cfg.Rate, perTx: 1, workers: 16}, cfg.LatencyDuration, nil, res, "latency")

	if cfg.NearLimit > 0 && res.drainRate > 0 {
		near := nearLimitLoad(res.drainRate, cfg.NearLimit)
		res.nearRate = near.rate
		e.progress("paced load near the limit: %d events/s (%d per transaction) for %s", near.rate, near.perTx, cfg.LatencyDuration)
		cpuFrom := sampleCPU(rs.pids())
		res.near = e.latencyPhase(ctx, s, recv, rs, near, cfg.LatencyDuration, nil, res, "near-limit")
		res.nearCPU = cpuPerEvent(cpuFrom, sampleCPU(rs.pids()), res.near.n, runtime.NumCPU())
		// The column shows the rate the emitter reached, which on a busy
		// machine can fall short of the one asked for (a note says so).
		res.nearRate = int(float64(res.near.n) / cfg.LatencyDuration.Seconds())
	}

	e.progress("paced load for %s while transactions are held open", cfg.Hold)
	if e.otherErr != nil {
		res.note("held-tx: no transaction in another database (%v)", e.otherErr)
	}
	held, err := holdTransactions(ctx, s, e.otherURL)
	if err != nil {
		res.note("held-tx: %v", err)
	} else {
		res.held = e.latencyPhase(ctx, s, recv, rs, paced{rate: cfg.Rate, perTx: 1, workers: 16}, cfg.Hold, held, res, "held-tx")
	}
}

// finishRow records the relays' peak memory and how they ended, stops
// them and notes duplicate deliveries.
func (e *env) finishRow(recv *receiver, rs *relaySet, res *result, stopped *bool) error {
	if err := rs.err(); err != nil {
		res.note("a relay ended during the run: %s", firstLine(err))
	}
	res.peakKB = rs.peakKB()
	*stopped = true
	if err := rs.stop(); err != nil {
		res.note("%v", err)
	}
	if n := recv.duplicateCount(); n > 0 {
		res.note("%d duplicate deliveries", n)
	}
	// Retained rows, delivered before the row started, must stay so.
	if res.received = recv.count(); res.received > res.emitted {
		res.note("%d events arrived that the row did not emit", res.received-res.emitted)
	}
	return nil
}

// probe starts the row's relays on the still empty outbox and stops them
// after a second, reporting why one exited meanwhile.
// A WAL relay also makes its slot then, which must exist before the
// events are emitted: a slot sees only what is committed after it.
func (e *env) probe(s *sandbox, spec rowSpec, prefix string) error {
	rs, err := startRelays(e, s, spec.bin, spec.path, prefix, spec.replicas, spec.flags...)
	if err != nil {
		return err
	}
	if err := rs.survives(time.Second); err != nil {
		_ = rs.stop()
		return err
	}
	if spec.path == string(relay.PathWAL) {
		if err := s.waitSlot(30*time.Second, rs.failed()); err != nil {
			_ = rs.stop()
			return err
		}
	}
	return rs.stop()
}

// drain waits for ids, which were all committed before the relays started
// at start, and for the outbox to report them delivered, and records the
// rate. It fails only when a relay ended, which makes the row n/a.
func (e *env) drain(ctx context.Context, s *sandbox, spec rowSpec, recv *receiver, rs *relaySet, ids []string, start time.Time,
	cpuFrom cpuSample, res *result) error {
	// Drained means every row recorded as delivered, which the relays do
	// only after the broker acknowledged it; then every id must have
	// arrived.
	timeout := e.cfg.Timeout
	if spec.path == string(relay.PathWAL) {
		// The WAL path writes nothing per delivered row: drained is every
		// event arrived (it confirms its position only after the broker's
		// acks).
		missing := recv.await(ctx, ids, timeout, rs.failed())
		if err := rs.err(); err != nil {
			return err
		}
		if missing > 0 {
			res.note("drain: %d of %d events missing after %s", missing, len(ids), timeout)
			return nil
		}
		res.drainRate = float64(len(ids)) / time.Since(start).Seconds()
		res.drainCPU = cpuPerEvent(cpuFrom, sampleCPU(rs.pids()), len(ids), runtime.NumCPU())
		return nil
	}
	wait := waitBacklogEmpty
	if spec.logged() {
		wait = waitLogBacklogEmpty
	}
	if err := wait(ctx, s.db, timeout, rs.failed()); err != nil {
		if rerr := rs.err(); rerr != nil {
			return rerr
		}
		res.note("drain: %v", err)
		return nil
	}
	res.drainRate = float64(len(ids)) / time.Since(start).Seconds()
	res.drainCPU = cpuPerEvent(cpuFrom, sampleCPU(rs.pids()), len(ids), runtime.NumCPU())
	if missing := recv.await(ctx, ids, timeout, rs.failed()); missing > 0 {
		if err := rs.err(); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		res.note("drain: %d of %d events missing after %s", missing, len(ids), timeout)
	}
	return nil
}

// paced is the shape of a paced load.
type paced struct {
	rate    int // events/s
	perTx   int // events per transaction
	workers int // transactions committing at once
	// lead, when positive, schedules each event (events.DeliverAt) that
	// long after its tick: the scheduled section's lateness load.
	lead time.Duration
}

// nearLimitLoad is the paced load at fraction of the measured drain rate.
// One event per transaction cannot reach such rates here (each commit
// waits for its WAL flush, and the emitter shares the two cores with the
// relay, PostgreSQL and the broker), so its events come in transactions
// of up to 50, at most 500 transactions a second.
func nearLimitLoad(drainRate, fraction float64) paced {
	rate := max(int(drainRate*fraction), 1)
	perTx := min(max(1, (rate+499)/500), 50)
	return paced{rate: rate, perTx: perTx, workers: 16}
}

// latencyPhase runs the paced load for d with the relays running, releases
// held (if any) when the load ends, waits for the events and returns their
// commit-to-receive latencies.
func (e *env) latencyPhase(ctx context.Context, s *sandbox, recv *receiver, rs *relaySet, p paced, d time.Duration,
	held *heldTxs, res *result, phase string) stats {
	load := runPaced(ctx, s.client, p, d, e.cfg.Aggregates)
	res.emitted += len(load.ids)
	if held != nil {
		if err := held.release(); err != nil {
			res.note("%s: %v", phase, err)
		}
	}
	if load.err != nil {
		res.note("%s: %v", phase, load.err)
	}
	if got := float64(len(load.ids)) / load.span.Seconds(); load.span > 0 && got < 0.95*float64(p.rate) {
		res.note("%s: emitter reached only %.0f events/s", phase, got)
	}
	missing := recv.await(ctx, load.ids, e.cfg.Timeout, rs.failed())
	if missing > 0 && rs.err() == nil && ctx.Err() == nil {
		res.note("%s: %d of %d events missing after %s", phase, missing, len(load.ids), e.cfg.Timeout)
	}
	ds := make([]time.Duration, 0, len(load.ids))
	for _, id := range load.ids {
		if at, ok := recv.receivedAt(id); ok {
			// The relay may see the commit a hair before Commit returns here.
			ds = append(ds, max(0, at.Sub(load.committed[id])))
		}
	}
	return summarize(ds)
}

// waitBacklogEmpty waits until the outbox in db (PostgreSQL's, or a poll
// section's database) holds nothing pending: every event arrived, but the
// relay records deliveries only after the broker's acks. It asks whether
// any row is pending, which reads one index entry, not how many are:
// counting a large backlog every few milliseconds would take CPU from the
// relays it measures. The table name is left unquoted: MySQL reads double
// quotes as a string.
func waitBacklogEmpty(ctx context.Context, db *sql.DB, timeout time.Duration, abort <-chan struct{}) error {
	pending := `FROM ` + schema.OutboxTable + ` WHERE delivered_at IS NULL`
	return waitEmpty(ctx, timeout, abort, func() (bool, error) {
		var left bool
		err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 `+pending+`)`).Scan(&left)
		return left, err
	}, func() (string, error) {
		var n int64
		err := db.QueryRowContext(ctx, `SELECT count(*) `+pending).Scan(&n)
		return strconv.FormatInt(n, 10), err
	})
}

// waitLogBacklogEmpty is waitBacklogEmpty on a PostgreSQL outbox whose
// relays keep a delivered log: its delivered rows keep delivered_at NULL,
// so it reads the backlog as the project does (outboxdb.ReadPending, from
// the log's floor), one row at most.
func waitLogBacklogEmpty(ctx context.Context, db *sql.DB, timeout time.Duration, abort <-chan struct{}) error {
	t := outboxdb.New(schema.OutboxTable, "")
	return waitEmpty(ctx, timeout, abort, func() (bool, error) {
		p, err := outboxdb.ReadPending(ctx, db, t, 1)
		return p.Count > 0, err
	}, func() (string, error) {
		p, err := outboxdb.ReadPending(ctx, db, t, 0)
		if p.Capped {
			return "at least " + strconv.FormatInt(p.Count, 10), err
		}
		return strconv.FormatInt(p.Count, 10), err
	})
}

// waitEmpty asks left every 10 ms until it says nothing is left, and says
// how many are (count) when timeout passes first.
func waitEmpty(ctx context.Context, timeout time.Duration, abort <-chan struct{}, left func() (bool, error), count func() (string, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		l, err := left()
		if err != nil {
			return fmt.Errorf("reading the backlog: %w", err)
		}
		if !l {
			return nil
		}
		if time.Now().After(deadline) {
			n, err := count()
			if err != nil {
				return fmt.Errorf("reading the backlog: %w", err)
			}
			return fmt.Errorf("%s events still pending in the outbox after %s", n, timeout)
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-abort:
			return errors.New("a relay ended while events were pending")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
