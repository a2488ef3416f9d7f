package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay"
	"github.com/entoutbox/entoutbox/sqlitedb"
)

// The SQLite section: the same measures as the PostgreSQL rows, on a
// SQLite file (package sqlitedb's settings) and the relay's poll path, in
// the same run: the emit cost beside a bare INSERT, the drain of a
// backlog to the broker, and commit-to-broker latency at --rate under the
// relay's default poll interval and a short one (SQLite has no LISTEN: the
// poll interval is what wakes the relay).

// sqliteFile is a SQLite outbox of the bench's own, migrated.
type sqliteFile struct {
	dir, url string
	db       *sql.DB
	client   *testent.Client
}

func newSQLiteFile(ctx context.Context) (*sqliteFile, error) {
	dir, err := os.MkdirTemp("", "entoutbox-bench-sqlite-")
	if err != nil {
		return nil, err
	}
	f := &sqliteFile{dir: dir, url: "sqlite:" + filepath.Join(dir, "bench.db")}
	if f.db, err = sqlitedb.Open(f.url); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	f.client = testent.NewClient(testent.Driver(entsql.OpenDB(dialect.SQLite, f.db)))
	if err := f.client.Schema.Create(ctx); err != nil {
		f.close()
		return nil, fmt.Errorf("migrating the SQLite file: %w", err)
	}
	return f, nil
}

func (f *sqliteFile) close() {
	_ = f.db.Close()
	_ = os.RemoveAll(f.dir)
}

// measureSQLite runs the section and returns its lines.
func measureSQLite(ctx context.Context, e *env) ([]string, error) {
	var lines []string
	if e.cfg.EmitTx > 0 {
		e.progress("SQLite: emit cost")
		line, err := sqliteEmitCost(ctx, e)
		if err != nil {
			return nil, err
		}
		lines = append(lines, line)
	}
	e.progress("SQLite: drain and latency")
	rows, err := sqliteRelayRows(ctx, e)
	return append(lines, rows...), err
}

// sqliteEmitCost times transactions that write one row with a bare INSERT
// and with one generated Emit, interleaved.
func sqliteEmitCost(ctx context.Context, e *env) (string, error) {
	f, err := newSQLiteFile(ctx)
	if err != nil {
		return "", err
	}
	defer f.close()
	body, err := json.Marshal(payload)
	if err != nil {
		return "", err
	}
	aggs := e.cfg.Aggregates
	const bare = `INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload)
		VALUES (?, 'profile.updated', 1, 'profiles', 'Profile', ?, ?)`
	variants := []*emitVariant{
		{name: "bare INSERT", run: func(ctx context.Context, i int) error {
			return execTx(ctx, f.db, bare, []any{uuid.Must(uuid.NewV7()).String(), aggregateID(i, aggs), string(body)})
		}},
		{name: "1 Emit", run: func(ctx context.Context, i int) error {
			return f.client.WithTx(ctx, func(tx *testent.Tx) error {
				return tx.Outbox.EmitProfileUpdated(ctx, aggregateID(i, aggs), payload)
			})
		}},
	}
	if err := e.timeVariants(ctx, variants); err != nil {
		return "", err
	}
	b, one := summarizeCost(variants[0].took), summarizeCost(variants[1].took)
	return fmt.Sprintf("SQLite emit cost (%d tx each, interleaved; mean, p50 in brackets): bare INSERT %s/tx (%s); "+
		"1 Emit %s/tx (%s) = %.2fx of the bare INSERT", e.cfg.EmitTx, fmtMs(b.mean), fmtMs(b.p50), fmtMs(one.mean),
		fmtMs(one.p50), ratio(one.mean, b.mean)), nil
}

// sqliteRelayRows drains a backlog with the poll path, then measures the
// latency of a paced load under each poll interval.
func sqliteRelayRows(ctx context.Context, e *env) ([]string, error) {
	f, err := newSQLiteFile(ctx)
	if err != nil {
		return nil, err
	}
	defer f.close()
	prefix := fmt.Sprintf("sqlite%d_", time.Now().UnixNano())
	recv, err := newReceiver(ctx, e.cfg.Broker, prefix+"profiles")
	if err != nil {
		return nil, fmt.Errorf("subscribing: %w", err)
	}
	defer recv.close()
	ids, err := prefill(ctx, f.client, e.cfg.Events, e.cfg.Aggregates)
	if err != nil {
		return nil, err
	}
	var lines []string
	for i, poll := range []time.Duration{0, 20 * time.Millisecond} {
		rs, err := startSQLiteRelay(e, f.url, prefix, poll)
		if err != nil {
			return lines, err
		}
		label := "poll interval " + poll.String()
		if poll == 0 {
			label = "default poll interval " + relay.DefaultSQLitePollInterval.String()
		}
		if i == 0 {
			line, err := awaitDrain(ctx, e, recv, rs, ids, fmt.Sprintf("%d aggregates", e.cfg.Aggregates))
			if err != nil {
				_ = rs.stop()
				return lines, err
			}
			lines = append(lines, line)
		}
		load := runPaced(ctx, f.client, paced{rate: e.cfg.Rate, perTx: 1, workers: 4}, e.cfg.LatencyDuration, e.cfg.Aggregates)
		missing := recv.await(ctx, load.ids, e.cfg.Timeout, rs.failed())
		ds := make([]time.Duration, 0, len(load.ids))
		for _, id := range load.ids {
			if at, ok := recv.receivedAt(id); ok {
				ds = append(ds, max(0, at.Sub(load.committed[id])))
			}
		}
		st := summarize(ds)
		line := fmt.Sprintf("SQLite commit-to-broker at %d events/s, %s: p50 %s, p99 %s (%d events",
			e.cfg.Rate, label, fmtMs(st.p50), fmtMs(st.p99), len(load.ids))
		if missing > 0 {
			line += fmt.Sprintf(", %d missing", missing)
		}
		if load.err != nil {
			line += ", " + firstLine(load.err)
		}
		lines = append(lines, line+")")
		if err := rs.stop(); err != nil {
			return lines, err
		}
	}
	for _, shape := range []struct{ aggregates, retained int }{{10, 0}, {e.cfg.Aggregates, sqliteRetained}} {
		line, err := sqliteDrain(ctx, e, shape.aggregates, shape.retained)
		if err != nil {
			return lines, err
		}
		lines = append(lines, line)
	}
	return lines, nil
}

// sqliteRetained is how many delivered rows the huge-table drain row
// keeps in the outbox.
const sqliteRetained = 200_000

// sqliteDrain drains a backlog on a file of its own, its events spread
// over aggregates (a few hot ones, or many), after retained delivered
// rows (an outbox whose cleanup runs rarely).
func sqliteDrain(ctx context.Context, e *env, aggregates, retained int) (string, error) {
	f, err := newSQLiteFile(ctx)
	if err != nil {
		return "", err
	}
	defer f.close()
	if retained > 0 {
		if _, err := f.db.ExecContext(ctx, sqliteRetainedRows, retained); err != nil {
			return "", fmt.Errorf("writing delivered rows: %w", err)
		}
	}
	prefix := fmt.Sprintf("sqlite%d_", time.Now().UnixNano())
	recv, err := newReceiver(ctx, e.cfg.Broker, prefix+"profiles")
	if err != nil {
		return "", fmt.Errorf("subscribing: %w", err)
	}
	defer recv.close()
	ids, err := prefill(ctx, f.client, e.cfg.Events, aggregates)
	if err != nil {
		return "", err
	}
	rs, err := startSQLiteRelay(e, f.url, prefix, 0)
	if err != nil {
		return "", err
	}
	what := fmt.Sprintf("%d aggregates", aggregates)
	if retained > 0 {
		what += fmt.Sprintf(", %d delivered rows kept", retained)
	}
	line, err := awaitDrain(ctx, e, recv, rs, ids, what)
	if serr := rs.stop(); err == nil {
		err = serr
	}
	return line, err
}

// sqliteRetainedRows writes ?1 delivered rows, as a relay leaves them.
const sqliteRetainedRows = `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
	INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, delivered_at)
	SELECT printf('00000000-0000-7000-8000-%012d', i), 'profile.updated', 1, 'profiles', 'Profile', i % 1000, '{}',
		strftime('%Y-%m-%d %H:%M:%f', 'now') FROM n`

// awaitDrain waits until every id arrived and says how fast.
func awaitDrain(ctx context.Context, e *env, recv *receiver, rs *relaySet, ids []string, what string) (string, error) {
	start := time.Now()
	if missing := recv.await(ctx, ids, e.cfg.Timeout, rs.failed()); missing > 0 {
		return "", fmt.Errorf("drain: %d of %d events missing after %s (%v)", missing, len(ids), e.cfg.Timeout, rs.err())
	}
	took := time.Since(start)
	return fmt.Sprintf("SQLite drain, poll path, 1 relay, %s: %d events in %s = %.0f events/s",
		what, len(ids), took.Round(time.Millisecond), float64(len(ids))/took.Seconds()), nil
}

// startSQLiteRelay runs the relay command on the SQLite file (its poll
// path), poll its --poll-interval (0: the relay's own).
func startSQLiteRelay(e *env, url, prefix string, poll time.Duration) (*relaySet, error) {
	args := []string{"relay", "--database-url", url, "--broker", e.cfg.Broker, "--topic-prefix", prefix, "--log-level", "error"}
	if poll > 0 {
		args = append(args, "--poll-interval", poll.String())
	}
	rs := &relaySet{exited: make(chan struct{})}
	if err := rs.start(e.bin, args); err != nil {
		return nil, err
	}
	return rs, nil
}

// sqliteSection is the section's text for the report.
func sqliteSection(lines []string, err error) string {
	if err != nil {
		return "SQLite: n/a (" + firstLine(err) + ")"
	}
	return strings.Join(lines, "\n")
}
