package main

import (
	"bytes"
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/internal/pgtest"
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
	})
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	for _, want := range []string{"relay", "drain ev/s", "p99 held-tx", "peak RSS",
		"stock watermill-sql + forwarder", "entoutbox fast, 1 replica", "entoutbox fast, 3 replicas", "emit cost"} {
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
	db, err := sql.Open("pgx", pgtest.ServerURL())
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
	specs, err := rowSpecs([]string{"fast", "wal"})
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
