package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay"
)

// The sections of the databases the relay reads with its poll path
// (SQLite, sqlite.go; MariaDB/MySQL, mysql.go): the same measures as the
// PostgreSQL rows, in the same run: the emit cost beside a bare INSERT,
// the drain of a backlog to the broker, and commit-to-broker latency at
// --rate under the relay's default poll interval and a short one (neither
// database has LISTEN: the poll interval is what wakes the relay), and,
// with --consumer-events, the consumers' events/s (pollconsumers.go).

// pollSection is how one such section makes its databases.
type pollSection struct {
	name  string // how its lines begin: "SQLite", "MariaDB"
	topic string // the stem of its topic prefixes
	// open makes a fresh database of the bench's own, migrated.
	open func(ctx context.Context) (*pollDB, error)
	// retainedRows writes ? delivered rows, as a relay leaves them (the
	// argument given once, as ?1 on SQLite).
	retainedRows string
	// shared: several relays share the outbox (MySQL); a drain row runs
	// three.
	shared bool
}

// pollDB is one database of a section, the bench's own.
type pollDB struct {
	url     string // what the relay command is given
	db      *sql.DB
	client  *testent.Client
	dialect outboxdb.Dialect
	remove  func() // removes the database, once db is closed
}

// migrate opens d's client on its database, in dialect, and creates the
// tables; on failure it closes d. what names the database in the error.
func (d *pollDB) migrate(ctx context.Context, dialect, what string) error {
	var err error
	if d.dialect, err = outboxdb.DialectOf(dialect); err != nil {
		d.close()
		return err
	}
	d.client = testent.NewClient(testent.Driver(entsql.OpenDB(dialect, d.db)))
	if err := d.client.Schema.Create(ctx); err != nil {
		d.close()
		return fmt.Errorf("migrating %s: %w", what, err)
	}
	return nil
}

func (d *pollDB) close() {
	_ = d.db.Close()
	d.remove()
}

// measurePoll runs the section and returns its lines.
func measurePoll(ctx context.Context, e *env, sec pollSection) ([]string, error) {
	var lines []string
	if e.cfg.EmitTx > 0 {
		e.progress("%s: emit cost", sec.name)
		line, err := pollEmitCost(ctx, e, sec)
		if err != nil {
			return nil, err
		}
		lines = append(lines, line)
	}
	e.progress("%s: drain and latency", sec.name)
	rows, err := pollRelayRows(ctx, e, sec)
	if lines = append(lines, rows...); err != nil || e.cfg.ConsumerEvents == 0 {
		return lines, err
	}
	rows, err = pollConsumerRows(ctx, e, sec)
	return append(lines, rows...), err
}

// pollEmitCost times transactions that write one row with a bare INSERT
// and with one generated Emit, interleaved.
func pollEmitCost(ctx context.Context, e *env, sec pollSection) (string, error) {
	d, err := sec.open(ctx)
	if err != nil {
		return "", err
	}
	defer d.close()
	body, err := json.Marshal(payload)
	if err != nil {
		return "", err
	}
	aggs := e.cfg.Aggregates
	const bare = `INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload)
		VALUES (?, 'profile.updated', 1, 'profiles', 'Profile', ?, ?)`
	variants := []*emitVariant{
		{name: "bare INSERT", run: func(ctx context.Context, i int) error {
			return execTx(ctx, d.db, bare, []any{uuid.Must(uuid.NewV7()).String(), aggregateID(i, aggs), string(body)})
		}},
		{name: "1 Emit", run: func(ctx context.Context, i int) error {
			return d.client.WithTx(ctx, func(tx *testent.Tx) error {
				return tx.Outbox.EmitProfileUpdated(ctx, aggregateID(i, aggs), payload)
			})
		}},
	}
	if err := e.timeVariants(ctx, variants, e.cfg.EmitTx, "1 event per transaction"); err != nil {
		return "", err
	}
	b, one := summarizeCost(variants[0].took), summarizeCost(variants[1].took)
	return fmt.Sprintf("%s emit cost (%d tx each, interleaved; mean, p50 in brackets): bare INSERT %s/tx (%s); "+
		"1 Emit %s/tx (%s) = %.2fx of the bare INSERT", sec.name, e.cfg.EmitTx, fmtMs(b.mean), fmtMs(b.p50), fmtMs(one.mean),
		fmtMs(one.p50), ratio(one.mean, b.mean)), nil
}

// pollRelayRows drains a backlog with the poll path, then measures the
// latency of a paced load under each poll interval, then drains backlogs
// of other shapes.
func pollRelayRows(ctx context.Context, e *env, sec pollSection) ([]string, error) {
	d, err := sec.open(ctx)
	if err != nil {
		return nil, err
	}
	defer d.close()
	prefix := pollPrefix(sec)
	defer deleteNATSStream(e.cfg.Broker, prefix+"profiles")
	recv, err := newReceiver(ctx, e.cfg.Broker, prefix+"profiles")
	if err != nil {
		return nil, fmt.Errorf("subscribing: %w", err)
	}
	defer recv.close()
	ids, deadlocks, err := prefill(ctx, d.client, e.cfg.Events, e.cfg.Aggregates)
	if err != nil {
		return nil, err
	}
	var lines []string
	for i, poll := range []time.Duration{0, 20 * time.Millisecond} {
		rs, err := startPollRelay(e, d.url, prefix, poll, 1)
		if err != nil {
			return lines, err
		}
		if i == 0 {
			line, err := awaitDrain(ctx, e, sec.name, recv, rs, ids, fmt.Sprintf("1 relay, %d aggregates", e.cfg.Aggregates))
			if err != nil {
				_ = rs.stop()
				return lines, err
			}
			lines = append(lines, line+deadlockNote(deadlocks))
		}
		lines = append(lines, pollLatency(ctx, e, sec.name, d, recv, rs, poll))
		if err := rs.stop(); err != nil {
			return lines, err
		}
	}
	shapes := []drainShape{{1, 10, 0}, {1, e.cfg.Aggregates, pollRetained}}
	if sec.shared {
		shapes = append(shapes, drainShape{3, e.cfg.Aggregates, 0}, drainShape{3, 10, 0})
	}
	for _, shape := range shapes {
		line, err := pollDrain(ctx, e, sec, shape)
		if err != nil {
			return lines, err
		}
		lines = append(lines, line)
	}
	return lines, nil
}

// pollLatency runs a paced load at --rate on d while rs relays it, poll
// being its --poll-interval (0: the relay's own), and says how long each
// event took from its commit to the broker.
func pollLatency(ctx context.Context, e *env, name string, d *pollDB, recv *receiver, rs *relaySet, poll time.Duration) string {
	label := "poll interval " + poll.String()
	if poll == 0 {
		label = "default poll interval " + relay.DefaultSQLitePollInterval.String()
	}
	load := runPaced(ctx, d.client, paced{rate: e.cfg.Rate, perTx: 1, workers: 4}, e.cfg.LatencyDuration, e.cfg.Aggregates)
	missing := recv.await(ctx, load.ids, e.cfg.Timeout, rs.failed())
	ds := make([]time.Duration, 0, len(load.ids))
	for _, id := range load.ids {
		if at, ok := recv.receivedAt(id); ok {
			ds = append(ds, max(0, at.Sub(load.committed[id])))
		}
	}
	st := summarize(ds)
	line := fmt.Sprintf("%s commit-to-broker at %d events/s, %s: p50 %s, p99 %s (%d events",
		name, e.cfg.Rate, label, fmtMs(st.p50), fmtMs(st.p99), len(load.ids))
	if missing > 0 {
		line += fmt.Sprintf(", %d missing", missing)
	}
	if load.err != nil {
		line += ", " + firstLine(load.err)
	}
	return line + ")"
}

// pollRetained is how many delivered rows the huge-table drain row keeps
// in the outbox.
const pollRetained = 200_000

// drainShape is a drain row's: relays sharing the outbox, aggregates the
// backlog spreads over (a few hot ones, or many), and delivered rows kept
// before it (an outbox whose cleanup runs rarely).
type drainShape struct{ relays, aggregates, retained int }

// pollDrain drains a backlog of shape on a database of its own.
func pollDrain(ctx context.Context, e *env, sec pollSection, shape drainShape) (string, error) {
	aggregates, retained := shape.aggregates, shape.retained
	d, err := sec.open(ctx)
	if err != nil {
		return "", err
	}
	defer d.close()
	if retained > 0 {
		if _, err := d.db.ExecContext(ctx, sec.retainedRows, retained); err != nil {
			return "", fmt.Errorf("writing delivered rows: %w", err)
		}
	}
	prefix := pollPrefix(sec)
	defer deleteNATSStream(e.cfg.Broker, prefix+"profiles")
	recv, err := newReceiver(ctx, e.cfg.Broker, prefix+"profiles")
	if err != nil {
		return "", fmt.Errorf("subscribing: %w", err)
	}
	defer recv.close()
	ids, deadlocks, err := prefill(ctx, d.client, e.cfg.Events, aggregates)
	if err != nil {
		return "", err
	}
	rs, err := startPollRelay(e, d.url, prefix, 0, shape.relays)
	if err != nil {
		return "", err
	}
	what := fmt.Sprintf("%d relay%s, %d aggregates", shape.relays, plural(shape.relays), aggregates)
	if retained > 0 {
		what += fmt.Sprintf(", %d delivered rows kept", retained)
	}
	line, err := awaitDrain(ctx, e, sec.name, recv, rs, ids, what)
	if serr := rs.stop(); err == nil {
		err = serr
	}
	return line + deadlockNote(deadlocks), err
}

// pollPrefix is a fresh topic prefix of the section's: its stream's name
// has "bench_" in it, so that deleteNATSStream removes it at the end.
func pollPrefix(sec pollSection) string {
	return fmt.Sprintf("bench_%s%d_", sec.topic, time.Now().UnixNano())
}

// deadlockNote says how many of the backlog's transactions ran again after
// the database broke a deadlock; "" for none.
func deadlockNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (emitting the backlog, 100 events per transaction on 4 connections: %d deadlocks, each transaction run again)", n)
}

// awaitDrain waits until every id arrived and says how fast.
func awaitDrain(ctx context.Context, e *env, name string, recv *receiver, rs *relaySet, ids []string, what string) (string, error) {
	start := time.Now()
	if missing := recv.await(ctx, ids, e.cfg.Timeout, rs.failed()); missing > 0 {
		return "", fmt.Errorf("drain: %d of %d events missing after %s (%v)", missing, len(ids), e.cfg.Timeout, rs.err())
	}
	took := time.Since(start)
	return fmt.Sprintf("%s drain, poll path, %s: %d events in %s = %.0f events/s",
		name, what, len(ids), took.Round(time.Millisecond), float64(len(ids))/took.Seconds()), nil
}

// startPollRelay runs n relay commands on the database at url (its poll
// path), poll their --poll-interval (0: the relay's own).
func startPollRelay(e *env, url, prefix string, poll time.Duration, n int) (*relaySet, error) {
	args := []string{"relay", "--database-url", url, "--broker", e.cfg.Broker, "--topic-prefix", prefix, "--log-level", "error"}
	if poll > 0 {
		args = append(args, "--poll-interval", poll.String())
	}
	rs := &relaySet{exited: make(chan struct{})}
	for range n {
		if err := rs.start(e.bin, args); err != nil {
			_ = rs.stop()
			return nil, err
		}
	}
	return rs, nil
}

// sectionText is a section's text for the report: its lines, or why it
// could not run.
func sectionText(name string, lines []string, err error) string {
	if err != nil {
		return name + ": n/a (" + firstLine(err) + ")"
	}
	return strings.Join(lines, "\n")
}

// plural is "s" for any n but one.
func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
