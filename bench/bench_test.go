package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/internal/mysqltest"
	"github.com/entoutbox/entoutbox/internal/pgschema"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/mysqldb"
)

const testBroker = "nats://127.0.0.1:4222"

// The whole bench at a tiny size, so that it keeps compiling and running;
// its numbers are not checked. The relay command is built first, outside
// the run's time limit, which is a liveness bound, like the wait for each
// phase's events: on an idle machine the run takes about 15 s.
func TestBenchRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole bench (at a tiny size), relay processes included")
	}
	requireServices(context.Background(), t)
	bin := filepath.Join(t.TempDir(), "entoutbox")
	if err := buildCommand(context.Background(), bin); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute) // under go test's default 10
	defer cancel()

	var out bytes.Buffer
	err := run(ctx, &out, config{
		DatabaseURL:     pgtest.ServerURL(),
		Broker:          testBroker,
		Paths:           []string{"compatible", "fast", "fast3"},
		Events:          300,
		Rate:            100,
		LatencyDuration: time.Second,
		Hold:            time.Second,
		EmitTx:          50,
		Aggregates:      50,
		PollInterval:    100 * time.Millisecond,
		Timeout:         time.Minute, // per phase, a liveness bound: events missing then fail the test below
		Progress:        tWriter{t},
		Bin:             bin,

		ConsumerEvents:     200,
		ConsumerAggregates: 20,
		ConsumerConns:      4,
		ConsumerPerTx:      50,
		SQLite:             true,
		MySQL:              true,
		MySQLURL:           mysqltest.ServerURL(),
	})
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	// The SQLite section ran each measure, every event arriving.
	for _, row := range []string{"SQLite emit cost", "SQLite drain, poll path, 1 relay, 50 aggregates", "SQLite drain, poll path, 1 relay, 10 aggregates",
		"SQLite drain, poll path, 1 relay, 50 aggregates, 200000 delivered rows kept", "SQLite commit-to-broker at 100 events/s, default poll interval 100ms",
		"SQLite commit-to-broker at 100 events/s, poll interval 20ms"} {
		line := tableLine(out.String(), row)
		if line == "" || strings.Contains(line, "missing") || strings.Contains(line, "n/a") {
			t.Errorf("SQLite section: %q: %q", row, line)
		}
	}
	checkPollConsumers(t, out.String(), "SQLite")
	checkMySQLSection(t, out.String())
	for _, want := range []string{"relay", "drain ev/s", "p99 held-tx", "peak RSS",
		"stock watermill-sql + forwarder", "entoutbox fast, 1 replica", "entoutbox fast, 3 replicas", "emit cost",
		"connections at peak, per process: a relay"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// Every relay row delivered every event to the receiver.
	for _, row := range []string{"stock watermill-sql + forwarder", "entoutbox fast, 1 replica", "entoutbox fast, 3 replicas"} {
		if line := tableLine(out.String(), row); strings.Contains(line, "missing") || strings.Contains(line, "n/a") {
			t.Errorf("relay row did not deliver: %s", line)
		}
	}
	// Every consumer row ran, handled the whole backlog and wrote one
	// dedupe record and one invoice per event (a row says otherwise in its
	// notes).
	for _, row := range []string{"the relay publishing the backlog", "generated handlers, 1 instance",
		"a hand-written Watermill handler", "the database alone, 1 event per transaction, 1 connection",
		"the database alone, 1 event per transaction, 4 connections", "the database alone, 50 events per transaction, 1 connection",
		"the database alone, 50 events per transaction in 2 multi-row INSERTs"} {
		line := tableLine(out.String(), row)
		switch {
		case line == "":
			t.Errorf("consumer table lacks the row %q", row)
		case strings.Contains(line, "n/a") || strings.Contains(line, "handled after") || strings.Contains(line, "dedupe records"):
			t.Errorf("consumer row did not work: %s", line)
		}
	}
}

// checkMySQLSection checks that the MariaDB section ran each measure,
// every event arriving, or, without the server, said why not in its place.
func checkMySQLSection(t *testing.T, out string) {
	t.Helper()
	db, err := mysqldb.Open(mysqltest.ServerURL())
	if err == nil {
		err = db.Ping()
		_ = db.Close()
	}
	if err != nil {
		if line := tableLine(out, "MariaDB: n/a (MariaDB/MySQL at "); line == "" {
			t.Errorf("without the server (%v), the MariaDB section does not say so", err)
		}
		return
	}
	name := "MariaDB"
	if tableLine(out, "MySQL emit cost") != "" {
		name = "MySQL"
	}
	if env := tableLine(out, "env: "); !strings.Contains(env, ", "+name+" ") {
		t.Errorf("the env line does not name the %s server: %q", name, env)
	}
	for _, row := range []string{"emit cost", "drain, poll path, 1 relay, 50 aggregates", "drain, poll path, 1 relay, 10 aggregates",
		"drain, poll path, 1 relay, 50 aggregates, 200000 delivered rows kept", "commit-to-broker at 100 events/s, default poll interval 100ms",
		"commit-to-broker at 100 events/s, poll interval 20ms"} {
		line := tableLine(out, name+" "+row)
		if line == "" || strings.Contains(line, "missing") || strings.Contains(line, "n/a") {
			t.Errorf("%s section: %q: %q", name, row, line)
		}
	}
	checkPollConsumers(t, out, name)
}

// checkPollConsumers checks that section name has a line for each
// consumer over 10 and over 50 aggregates, each having handled the whole
// backlog and written one dedupe record and one invoice per event (a line
// says otherwise in its notes).
func checkPollConsumers(t *testing.T, out, name string) {
	t.Helper()
	for _, aggregates := range []string{"10", "50"} {
		for _, consumer := range []string{pollGeneratedName, "a hand-written Watermill handler, serial, 1 event per transaction"} {
			row := name + " consumer, " + consumer + ", " + aggregates + " aggregates: "
			line := tableLine(out, row)
			switch {
			case line == "":
				t.Errorf("%s section lacks the line %q", name, row)
			case strings.Contains(line, "n/a") || strings.Contains(line, "handled after") || strings.Contains(line, "dedupe records"):
				t.Errorf("%s consumer line did not work: %s", name, line)
			}
		}
	}
}

// Without the MariaDB server, its section says so in its place; the rest
// of the run is not its concern.
func TestMySQLSectionWithoutServer(t *testing.T) {
	e := &env{cfg: config{MySQLURL: "mysql://root@127.0.0.1:1/test?timeout=2s"}}
	text, server := measureMySQL(context.Background(), e)
	if !strings.HasPrefix(text, "MariaDB: n/a (MariaDB/MySQL at mysql://root@127.0.0.1:1/test?timeout=2s is not reachable: ") || server != "" {
		t.Errorf("section %q, server %q", text, server)
	}
}

// tableLine is the first line of out that starts with prefix.
func tableLine(out, prefix string) string {
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, prefix) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// requireServices skips the test (fails it under CI=true) when PostgreSQL
// or NATS JetStream is not reachable.
func requireServices(ctx context.Context, t *testing.T) {
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	db, err := pgschema.Open(pgtest.ServerURL())
	if err == nil {
		err = db.PingContext(pctx)
		db.Close()
	}
	if err != nil {
		pgtest.Unavailable(t, "PostgreSQL at "+broker.Redacted(pgtest.ServerURL()), err)
	}
	b, err := broker.Open(pctx, testBroker, broker.Options{})
	if err != nil {
		pgtest.Unavailable(t, "NATS JetStream at "+testBroker, err)
	}
	_ = b.Close()
}

// tWriter sends the bench's progress lines to the test log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// With a baseline command, each relay row runs twice, the baseline build
// just before this one, so that the two are side by side in the table.
func TestBaselineRowsComeBeforeTheirRow(t *testing.T) {
	specs, err := rowSpecs([]string{"fast", "wal"}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := withBaseline(specs, "/old/entoutbox")
	want := []struct{ name, bin string }{
		{"entoutbox fast, 1 replica (baseline build)", "/old/entoutbox"},
		{"entoutbox fast, 1 replica", ""},
		{"entoutbox WAL (logical replication) (baseline build)", "/old/entoutbox"},
		{"entoutbox WAL (logical replication)", ""},
	}
	if len(got) != len(want) {
		t.Fatalf("rows = %d, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].name != w.name || got[i].bin != w.bin || got[i].path != specs[i/2].path {
			t.Errorf("row %d = %+v, want name %q bin %q path %q", i, got[i], w.name, w.bin, specs[i/2].path)
		}
	}
	if same := withBaseline(specs, ""); len(same) != len(specs) {
		t.Errorf("without a baseline the rows are %d, want %d", len(same), len(specs))
	}
}

// --scheduled-waiting reaches every relay row; the scheduled section's key
// stands for fast and WAL rows, each without and then with the section's
// events waiting, measuring lateness.
func TestScheduledRowSpecs(t *testing.T) {
	specs, err := rowSpecs([]string{"fast", "scheduled", "compatible"}, 7, 1000)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name, path string
		waiting    int
		lateness   bool
	}{
		{"entoutbox fast, 1 replica", "fast", 7, false},
		{"entoutbox fast, 1 replica", "fast", 0, true},
		{"entoutbox fast, 1 replica, 1,000 waiting", "fast", 1000, true},
		{"entoutbox WAL (logical replication)", "wal", 0, true},
		{"entoutbox WAL (logical replication), 1,000 waiting", "wal", 1000, true},
		{"stock watermill-sql + forwarder", "compatible", 7, false},
	}
	if len(specs) != len(want) {
		t.Fatalf("rows = %d, want %d: %+v", len(specs), len(want), specs)
	}
	keys := map[string]bool{}
	for i, w := range want {
		g := specs[i]
		if g.name != w.name || g.path != w.path || g.waiting != w.waiting || g.lateness != w.lateness {
			t.Errorf("row %d = %+v, want %+v", i, g, w)
		}
		if keys[g.key] { // names the relay's profile file
			t.Errorf("row %d: key %q repeats", i, g.key)
		}
		keys[g.key] = true
	}
	if _, err := rowSpecs([]string{"later"}, 0, 0); err == nil || !strings.Contains(err.Error(), `"later"`) {
		t.Errorf("an unknown row: err = %v, want one naming it", err)
	}
}

// The scheduled events the section keeps waiting are pending, of the
// measured payload's size, and none is due for a day.
func TestFillScheduled(t *testing.T) {
	ctx := context.Background()
	s := testSandbox(ctx, t)
	if err := s.fillScheduled(ctx, 1000, 10); err != nil {
		t.Fatal(err)
	}
	var n, aggregates, small int
	var soonest time.Duration
	if err := s.db.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT aggregate_id),
			count(*) FILTER (WHERE octet_length(payload::text) < $1),
			(extract(epoch FROM min(deliver_at) - now()) * 1e9)::bigint
		FROM outbox_scheduled_events WHERE cancelled_at IS NULL`, payloadSize).Scan(&n, &aggregates, &small, &soonest); err != nil {
		t.Fatal(err)
	}
	if n != 1000 || aggregates != 10 || small != 0 || soonest < 23*time.Hour {
		t.Errorf("pending = %d over %d aggregates, %d payloads under %d bytes, the first due in %s; want 1000 over 10, 0, over 23h",
			n, aggregates, small, payloadSize, soonest)
	}
}

// Lateness is measured from the outbox_deliver_at header the event arrived
// with, and an event that arrived before it counts as early, so that the
// section shows a promoter that sends early.
func TestLatenessOf(t *testing.T) {
	due := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	stamp := func(d time.Duration) string { return due.Add(d).Format("2006-01-02T15:04:05.000000Z07:00") }
	load := &pacedLoad{ids: []string{"on-time", "early", "unstamped", "emitted-late", "bad-stamp", "missing"},
		committed: map[string]time.Time{}, due: map[string]time.Time{}}
	for _, id := range load.ids {
		load.committed[id], load.due[id] = due.Add(-time.Second), due
	}
	load.committed["emitted-late"] = due.Add(time.Second)
	r := &receiver{got: map[string]time.Time{}, deliverAt: map[string]string{}}
	r.record("on-time", stamp(0), due.Add(10*time.Millisecond))
	// Due by the database 50 ms after the time the bench asked for, and
	// received 20 ms before that: early, though late by the bench's time.
	r.record("early", stamp(50*time.Millisecond), due.Add(30*time.Millisecond))
	r.record("unstamped", "", due.Add(40*time.Millisecond))
	r.record("emitted-late", stamp(0), due.Add(time.Second+5*time.Millisecond))
	r.record("bad-stamp", "yesterday", due.Add(20*time.Millisecond))
	r.record("on-time", stamp(0), due.Add(time.Hour)) // a duplicate: the first arrival counts

	l := latenessOf(load, r)
	if l.n != 5 || l.early != 1 || l.unstamped != 2 || l.emittedLate != 1 || !strings.Contains(l.badStamp, `"yesterday"`) {
		t.Errorf("lateness = %+v, want 5 measured, 1 early, 2 unstamped, 1 emitted late, the bad stamp named", l)
	}
	if l.p50 != 20*time.Millisecond || l.max != time.Second+5*time.Millisecond {
		t.Errorf("p50 = %s, max = %s; want 20ms, 1.005s", l.p50, l.max)
	}
}

// The scheduled section at a tiny size: every row drains, and every
// scheduled event arrives with its outbox_deliver_at header, none early.
// Its numbers are not checked.
func TestScheduledSectionRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the bench's scheduled section (at a tiny size), relay processes included")
	}
	ctx := context.Background()
	requireServices(ctx, t)
	admin, err := pgschema.Open(pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	pgtest.RequireLogical(t, admin) // the section's WAL rows
	admin.Close()
	bin := filepath.Join(t.TempDir(), "entoutbox")
	if err := buildCommand(ctx, bin); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 8*time.Minute) // under go test's default 10
	defer cancel()

	var out bytes.Buffer
	err = run(ctx, &out, config{
		DatabaseURL:             pgtest.ServerURL(),
		Broker:                  testBroker,
		Paths:                   []string{"scheduled"},
		ScheduledSectionWaiting: 1000,
		Events:                  300,
		Rate:                    100,
		LatencyDuration:         time.Second,
		Hold:                    time.Second,
		Aggregates:              50,
		Timeout:                 time.Minute, // per phase, a liveness bound: events missing then fail the test below
		Progress:                tWriter{t},
		Bin:                     bin,
	})
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if !strings.Contains(out.String(), "late p50") {
		t.Errorf("output lacks the scheduled section's table")
	}
	for _, row := range []string{"entoutbox fast, 1 replica", "entoutbox fast, 1 replica, 1,000 waiting",
		"entoutbox WAL (logical replication)", "entoutbox WAL (logical replication), 1,000 waiting"} {
		line := tableLine(out.String(), row+"   ") // the name ends where the columns begin
		// drain, peak RSS (2 fields), late p50, p99, max, early
		f := strings.Fields(strings.TrimPrefix(line, row))
		switch {
		case line == "":
			t.Errorf("the scheduled section lacks the row %q", row)
		case strings.Contains(line, "n/a") || strings.Contains(line, "missing") || strings.Contains(line, "header"):
			t.Errorf("scheduled row did not work: %s", line)
		case len(f) < 7 || f[6] != "0":
			t.Errorf("scheduled row %q: early is not 0: %s", row, line)
		}
	}
}

// The key-skew table at a tiny size, 2 aggregates of 50 events, with 1 and
// 2 instances, twice: both consumers apply every event once, and the generated
// handlers apply each aggregate's in seq order. This checks the bench, not
// a speed; the unordered handler's inversions are its nature.
func TestSkewTableRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the bench's key-skew table (at a tiny size)")
	}
	ctx := context.Background()
	requireServices(ctx, t)
	ctx, cancel := context.WithTimeout(ctx, 8*time.Minute) // under go test's default 10
	defer cancel()
	cfg := config{
		DatabaseURL:            pgtest.ServerURL(),
		Broker:                 testBroker,
		Timeout:                2 * time.Minute, // per consumer, a liveness bound: events missing then fail the test below
		Progress:               tWriter{t},
		SkewEvents:             100,
		SkewInstances:          []int{1, 2},
		SkewInstanceAggregates: []int{2},
		SkewRounds:             2,
	}
	e, err := newEnv(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	results, err := measureSkew(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := printSkewTable(&out, cfg, results); err != nil {
		t.Fatal(err)
	}
	t.Logf("output:\n%s", out.String())
	if len(results) != 2 || results[0].skewSpec != (skewSpec{2, 1}) || results[1].skewSpec != (skewSpec{2, 2}) {
		t.Fatalf("rows = %+v, want 2 aggregates with 1 then 2 instances", results)
	}
	for _, r := range results {
		if r.err != nil {
			t.Fatalf("row %+v: %v", r.skewSpec, r.err)
		}
		for _, side := range []struct {
			name string
			s    skewSide
		}{{"ordered", r.ordered}, {"unordered", r.unordered}} {
			s, f := side.s, side.s.effects
			if s.err != nil || len(s.notes) > 0 {
				t.Errorf("%+v %s: err %v, notes %q", r.skewSpec, side.name, s.err, s.notes)
			}
			if s.handled != 100 || f.records != 100 || f.effects != 100 || f.distinct != 100 || f.duplicates != 0 {
				t.Errorf("%+v %s: %d handled, effects %+v; want 100 handled, 100 records, 100 invoices of 100 events, 0 duplicates",
					r.skewSpec, side.name, s.handled, f)
			}
		}
		if n := r.ordered.effects.inversions; n != 0 {
			t.Errorf("%+v: the generated handlers wrote %d invoices after a later one of their aggregate", r.skewSpec, n)
		}
	}
}

// A row run several times shows the median rate and the range, the
// median run's CPU, and every run's faults: one run's inversion or missing
// event is not hidden by the median.
func TestMergeSkewRounds(t *testing.T) {
	sides := []skewSide{
		{rate: 300, cpu: 3 * time.Microsecond, redeliveries: 1},
		{rate: 100, cpu: 1 * time.Microsecond, notes: []string{"9 of 10 events applied"}, effects: skewEffects{inversions: 2}},
		{rate: 200, cpu: 2 * time.Microsecond, effects: skewEffects{duplicates: 1}},
	}
	got := mergeSides(sides)
	if got.rate != 200 || got.low != 100 || got.high != 300 || got.cpu != 2*time.Microsecond {
		t.Errorf("rate %v (%v-%v), cpu %v; want the median 200 (100-300), its cpu 2µs", got.rate, got.low, got.high, got.cpu)
	}
	if got.redeliveries != 1 || got.effects.inversions != 2 || got.effects.duplicates != 1 {
		t.Errorf("redeliveries %d, effects %+v; want every run's summed: 1, 2 inversions, 1 duplicate", got.redeliveries, got.effects)
	}
	if want := []string{"round 2: 9 of 10 events applied"}; !slices.Equal(got.notes, want) {
		t.Errorf("notes %q, want %q", got.notes, want)
	}
	if s := got.fmtRate(); s != "200 (100-300)" {
		t.Errorf("fmtRate = %q", s)
	}
	failed := mergeSides([]skewSide{{rate: 1}, {err: errors.New("no broker")}})
	if failed.err == nil {
		t.Error("a run that could not run at all is not the row's")
	}
}

// readSkewEffects counts, per consumer, an invoice written after one of a
// later seq of its aggregate as an inversion, and a second invoice of an
// event as a duplicate.
func TestReadSkewEffects(t *testing.T) {
	ctx := context.Background()
	s := testSandbox(ctx, t)
	// In insert order: aggregate 1 gets seq 1, 3, 2, 2, 4 (2 comes after 3,
	// twice), aggregate 2 gets 1, 2; another consumer's invoices are apart.
	for _, inv := range []struct {
		consumer     string
		order, seq   int64
		deduplicated bool
	}{
		{"a", 1, 1, true}, {"b", 1, 5, true}, {"a", 2, 1, true}, {"a", 1, 3, true}, {"a", 1, 2, true},
		{"a", 2, 2, true}, {"a", 1, 2, false}, {"b", 1, 1, true}, {"a", 1, 4, true},
	} {
		if inv.deduplicated {
			if _, err := s.db.ExecContext(ctx, insertProcessed, inv.consumer, uuid.New(), "profile.updated"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.db.ExecContext(ctx, insertInvoice, inv.order, inv.seq, "EUR", inv.consumer); err != nil {
			t.Fatal(err)
		}
	}
	got, err := readSkewEffects(ctx, s.db, "a")
	if err != nil {
		t.Fatal(err)
	}
	if want := (skewEffects{records: 6, effects: 7, distinct: 6, inversions: 2, duplicates: 1}); got != want {
		t.Errorf("effects of a = %+v, want %+v", got, want)
	}
	got, err = readSkewEffects(ctx, s.db, "b")
	if err != nil {
		t.Fatal(err)
	}
	if want := (skewEffects{records: 2, effects: 2, distinct: 2, inversions: 1}); got != want {
		t.Errorf("effects of b = %+v, want %+v", got, want)
	}
}

// The rows of the key-skew table: each aggregate count with one
// instance, then, at the instance aggregate counts, each other number of
// instances, in order of aggregates.
func TestSkewSpecs(t *testing.T) {
	got := skewSpecs([]int{1000, 1, 10}, []int{3, 1, 2}, []int{10, 5})
	want := []skewSpec{{1, 1}, {5, 1}, {5, 2}, {5, 3}, {10, 1}, {10, 2}, {10, 3}, {1000, 1}}
	if !slices.Equal(got, want) {
		t.Errorf("skewSpecs = %v, want %v", got, want)
	}
}

// testSandbox is a sandbox of the test's own, closed when it ends; the test
// runs in parallel, and is skipped with -short.
func testSandbox(ctx context.Context, t *testing.T) *sandbox {
	if testing.Short() {
		t.Skip("writes to PostgreSQL")
	}
	t.Parallel()
	requireServices(ctx, t)
	admin, err := pgschema.Open(pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	s, err := newSandbox(ctx, &env{cfg: config{DatabaseURL: pgtest.ServerURL()}, admin: admin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s
}

// The fleet section at a tiny size, 5 tenant databases: every row
// measures the busy tenant's events, the idle cost is measured once all
// are parked, the killed process's busy tenants are relayed again by the
// others with no event lost, and every database of the run is dropped at
// the end. Its numbers are not checked.
// sectionTest skips a test of a section under -short, needs the services,
// and builds the command the section's relays run; ctx ends with the test
// or after 8 minutes (under go test's default 10).
func sectionTest(t *testing.T, section string) (ctx context.Context, bin string) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the bench's " + section + " section (at a tiny size), relay processes included")
	}
	ctx = context.Background()
	requireServices(ctx, t)
	bin = filepath.Join(t.TempDir(), "entoutbox")
	if err := buildCommand(ctx, bin); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 8*time.Minute)
	t.Cleanup(cancel)
	return ctx, bin
}

func TestFleetSectionRuns(t *testing.T) {
	ctx, bin := sectionTest(t, "fleet")
	cfg := config{
		DatabaseURL:        pgtest.ServerURL(),
		Broker:             testBroker,
		Rate:               50,
		LatencyDuration:    time.Second,
		Aggregates:         50,
		Timeout:            2 * time.Minute, // per phase, a liveness bound: events missing then fail the test below
		Progress:           tWriter{t},
		Bin:                bin,
		FleetDatabases:     5,
		FleetIdleAfter:     2 * time.Second,
		FleetIdleWindow:    2 * time.Second,
		FleetProcesses:     3,
		FleetBusy:          5,
		FleetBusyRate:      10,
		FleetBacklog:       2000,
		FleetMemberTimeout: 3 * time.Second,
		FleetLease:         3 * time.Second,
	}
	e, err := newEnv(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	fs, err := measureFleet(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := fs.print(&out); err != nil {
		t.Fatal(err)
	}
	t.Logf("output:\n%s", out.String())
	for _, r := range fs.rows {
		// Notes (an emitter short of its rate on a busy machine, what the
		// processes logged) are shown, not failures; a missing event is
		// one, as the count says.
		if r.err != nil || r.lat.n != cfg.Rate*int(cfg.LatencyDuration/time.Second) || slices.ContainsFunc(r.notes, isMissingNote) {
			t.Errorf("row %q: err %v, %d events measured, notes %q; want every event of the load", r.name, r.err, r.lat.n, r.notes)
		}
		if strings.HasPrefix(r.name, "fleet") && r.wake <= 0 {
			t.Errorf("row %q: the parked tenant's first event was not measured", r.name)
		}
	}
	if len(fs.rows) != 5 {
		t.Errorf("%d rows, want 5 (the last, the backlog's)", len(fs.rows))
	}
	if last := fs.rows[len(fs.rows)-1]; !slices.ContainsFunc(last.notes, func(n string) bool { return strings.HasPrefix(n, "the backlog drained in") }) {
		t.Errorf("the backlog row: notes %q; want the backlog drained", last.notes)
	}
	if c := fs.idle; c.err != nil || c.conns.n == 0 || c.opened <= 0 {
		t.Errorf("idle cost: err %v, %d connection samples, %.1f sessions/s; want samples and the prober's sessions", c.err, c.conns.n, c.opened)
	}
	k := fs.kill
	if k.err != nil || len(k.owned) == 0 || len(k.recovery) != len(k.owned) || k.unrecovered > 0 || k.lost > 0 || k.emitted == 0 {
		t.Errorf("kill row: %+v; want the killed process's busy tenants relayed again, every event arrived", k)
	}
	admin, err := pgschema.Open(pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var left int
	if err := admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_database WHERE left(datname, length($1)) = $1`, fs.dbs.prefix).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left > 0 {
		t.Errorf("%d databases of the run are left", left)
	}
}

func isMissingNote(note string) bool { return strings.Contains(note, "missing") }

// The retention section at a tiny size: every cell filled, the retained
// rows never published again, and the week's cleanup keeping its days.
func TestRetentionSectionRuns(t *testing.T) {
	ctx, bin := sectionTest(t, "retention")
	cfg := config{
		DatabaseURL:        pgtest.ServerURL(),
		Broker:             testBroker,
		Events:             2000,
		Rate:               50,
		LatencyDuration:    time.Second,
		Aggregates:         50,
		Timeout:            2 * time.Minute, // per phase, a liveness bound: events missing then fail the test below
		Progress:           tWriter{t},
		Bin:                bin,
		Hold:               time.Second, // not run by the section
		Retention:          true,
		RetentionRows:      2000,
		RetentionDays:      3,
		RetentionDayEvents: 500,
		RetentionKeep:      1,
	}
	if err := cfg.check(); err != nil {
		t.Fatal(err)
	}
	e, err := newEnv(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	sec, err := measureRetention(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := sec.print(&out); err != nil {
		t.Fatal(err)
	}
	t.Logf("output:\n%s", out.String())
	if strings.Contains(out.String(), "n/a") {
		t.Errorf("a cell is n/a")
	}
	if len(sec.rows) != 2*len(retentionKeys) {
		t.Errorf("%d rows of retained rows, want %d", len(sec.rows), 2*len(retentionKeys))
	}
	for _, r := range sec.rows {
		res := r.res
		// An emitter short of its rate on a busy machine is shown, not a
		// failure; a missing event, or one the row did not emit (a
		// retained row published again), is one.
		if res.err != nil || res.drainRate <= 0 || res.latency.n != cfg.Rate*int(cfg.LatencyDuration/time.Second) ||
			res.received != res.emitted || slices.ContainsFunc(res.notes, isMissingNote) {
			t.Errorf("%s beside %d retained rows: err %v, drain %.0f/s, %d events measured, %d received of %d emitted, notes %q",
				r.key, r.retained, res.err, res.drainRate, res.latency.n, res.received, res.emitted, res.notes)
		}
		if (r.retained > 0) != (res.retainedIn > 0) {
			t.Errorf("%s beside %d retained rows: inserted in %s", r.key, r.retained, res.retainedIn)
		}
	}
	if len(sec.week) != len(retentionKeys) {
		t.Errorf("%d rows of the week, want %d", len(sec.week), len(retentionKeys))
	}
	for _, w := range sec.week {
		kept := int64(cfg.RetentionKeep * cfg.RetentionDayEvents)
		deleted := int64((cfg.RetentionDays - cfg.RetentionKeep) * cfg.RetentionDayEvents)
		if w.err != nil || w.outboxSize <= 0 || (w.key == "fastlog") != (w.logSize > 0) || w.live != kept || w.deleted != deleted ||
			w.deadBefore <= 0 || w.insert <= 0 || w.deliver <= 0 || w.cleanup <= 0 || w.vacuum <= 0 {
			t.Errorf("week of %s: %+v; want every cell, %d rows kept and %d deleted", w.key, w, kept, deleted)
		}
	}
}
