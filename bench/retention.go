package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/relay"
	"github.com/entoutbox/entoutbox/schema"
)

// The retention section (--retention): what a table that keeps its
// delivered rows costs each way of marking them, stamping delivered_at
// (fast) or the delivered log (fastlog).
//
//   - retained rows: each row's drain and commit-to-broker latency at
//     --rate on an empty outbox, then beside RetentionRows delivered rows,
//     marked as the row's relay marks them (measured by measureRow, as
//     --retained is).
//   - a week of traffic: RetentionDays simulated days of RetentionDayEvents
//     rows each, delivered as each path marks them, the project's cleanup
//     (relay.CleanupDelivered) keeping RetentionKeep days, then a VACUUM,
//     each day; the outbox's size on disk after the last day.

// retentionKeys are the rows the section compares.
var retentionKeys = []string{"fast", "fastlog"}

// retentionBatch is how many rows one statement marks delivered, as the
// relay's acks do.
const retentionBatch = 500

// retentionCompactEvery is how many rows the simulated log relay marks
// between two moves of its floor (the relay moves it every 2 s).
const retentionCompactEvery = 10_000

type retentionSection struct {
	cfg   config
	rows  []retentionRow
	load  [2]string // load average at the start and end of the first table
	week  []weekResult
	wload [2]string
}

type retentionRow struct {
	key      string
	retained int
	res      result
}

// weekResult is one path after the simulated week.
type weekResult struct {
	key        string
	name       string
	err        error
	outboxSize int64 // pg_total_relation_size
	logSize    int64 // both log tables', 0 for stamping
	live       int64 // the outbox's rows, counted
	deadBefore int64 // the outbox's and the log's dead tuples before the last VACUUM
	deadAfter  int64 // and after it
	deleted    int64 // rows the cleanup deleted over the week
	insert     time.Duration
	deliver    time.Duration
	compact    time.Duration // of deliver, the floor's moves
	cleanup    time.Duration
	vacuum     time.Duration
}

func (w weekResult) total() time.Duration { return w.insert + w.deliver + w.cleanup + w.vacuum }

// measureRetention runs both tables of the section.
func measureRetention(ctx context.Context, e *env) (*retentionSection, error) {
	sec := &retentionSection{cfg: e.cfg}
	specs, err := rowSpecs(retentionKeys, 0, 0)
	if err != nil {
		return nil, err
	}
	sec.load[0] = loadAverage()
	for _, spec := range specs {
		spec.latencyOnly = true
		for _, retained := range []int{0, e.cfg.RetentionRows} {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			re := *e
			re.cfg.Retained = retained
			e.progress("== retention: %s, %d retained rows", spec.name, retained)
			sec.rows = append(sec.rows, retentionRow{key: spec.key, retained: retained, res: measureRow(ctx, &re, spec)})
		}
	}
	sec.load[1] = loadAverage()
	sec.wload[0] = loadAverage()
	for _, spec := range specs {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		e.progress("== retention: a week of traffic, %s", spec.name)
		w := weekResult{key: spec.key, name: spec.name}
		if err := e.simulateWeek(ctx, spec.logged(), &w); err != nil {
			w.err = err
		}
		sec.week = append(sec.week, w)
	}
	sec.wload[1] = loadAverage()
	return sec, ctx.Err()
}

// timed runs one statement and adds its time to sum.
func timed(ctx context.Context, db *sql.DB, sum *time.Duration, query string, args ...any) (sql.Result, error) {
	start := time.Now()
	r, err := db.ExecContext(ctx, query, args...)
	*sum += time.Since(start)
	return r, err
}

// simulateWeek runs the simulated days in a fresh schema and measures the
// outbox on disk after them.
func (e *env) simulateWeek(ctx context.Context, logged bool, w *weekResult) error {
	cfg := e.cfg
	s, err := newSandbox(ctx, e)
	if err != nil {
		return err
	}
	defer s.close()
	t := outboxdb.New(schema.OutboxTable, "")
	tables := []string{t.Outbox}
	if logged {
		if _, err := s.db.ExecContext(ctx, t.FastLog().Create); err != nil {
			return fmt.Errorf("creating the delivered log: %w", err)
		}
		tables = append(tables, t.DeliveredLog(), t.DeliveredFloor())
	}
	// Autovacuum may be on on another server: off on these tables, so that
	// every VACUUM is the one the section runs.
	for _, tbl := range tables {
		if _, err := s.db.ExecContext(ctx, `ALTER TABLE `+pgsql.QuoteIdent(tbl)+
			` SET (autovacuum_enabled = false, toast.autovacuum_enabled = false)`); err != nil {
			return fmt.Errorf("turning autovacuum off on %s: %w", tbl, err)
		}
	}
	quoted := make([]string, len(tables))
	for i, tbl := range tables {
		quoted[i] = pgsql.QuoteIdent(tbl)
	}
	vacuum := `VACUUM ` + strings.Join(quoted, ", ")
	n := cfg.RetentionDayEvents
	day := 24 * time.Hour
	for d := 1; d <= cfg.RetentionDays; d++ {
		ago := cfg.RetentionDays - d // days before the real now
		e.progress("day %d of %d: %d events", d, cfg.RetentionDays, n)
		var lastID int64
		if err := s.db.QueryRowContext(ctx, `SELECT coalesce(max(id), 0) FROM `+pgsql.QuoteIdent(t.Outbox)).Scan(&lastID); err != nil {
			return fmt.Errorf("reading the last id: %w", err)
		}
		// In transactions of retentionBatch rows: a day's events come in
		// many transactions, and the floor's move reads the rows of the
		// transactions in progress in its snapshot, which one huge
		// transaction would make the whole day.
		start := time.Now()
		created := fmt.Sprintf("now() - interval '%d days'", ago)
		for from := (d - 1) * n; from < d*n; from += retentionBatch {
			if err := insertTx(ctx, s.db, from, min(from+retentionBatch, d*n), cfg.Aggregates, created); err != nil {
				return fmt.Errorf("day %d: inserting its events: %w", d, err)
			}
		}
		w.insert += time.Since(start)
		ids, err := dayIDs(ctx, s.db, lastID)
		if err != nil {
			return fmt.Errorf("day %d: %w", d, err)
		}
		if err := deliverDay(ctx, s.db, t, logged, ids, time.Now().Add(-time.Duration(ago)*day), &w.deliver, &w.compact); err != nil {
			return fmt.Errorf("day %d: %w", d, err)
		}
		// The cleanup keeps RetentionKeep days before the simulated now,
		// ago days before the real one.
		start = time.Now()
		deleted, err := relay.CleanupDelivered(ctx, s.db, schema.OutboxTable, time.Duration(ago+cfg.RetentionKeep)*day, 0)
		w.cleanup += time.Since(start)
		w.deleted += deleted
		if err != nil {
			return fmt.Errorf("day %d: cleanup: %w", d, err)
		}
		// The day's statements' statistics first, so that the VACUUM's
		// count of dead tuples is not added to afterwards.
		if err := settleStats(ctx); err != nil {
			return err
		}
		if d == cfg.RetentionDays {
			if w.deadBefore, err = deadTuples(ctx, s.db, tables); err != nil {
				return err
			}
		}
		if _, err := timed(ctx, s.db, &w.vacuum, vacuum); err != nil {
			return fmt.Errorf("day %d: %w", d, err)
		}
	}
	if err := settleStats(ctx); err != nil {
		return err
	}
	if w.deadAfter, err = deadTuples(ctx, s.db, tables); err != nil {
		return err
	}
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM `+pgsql.QuoteIdent(t.Outbox)).Scan(&w.live); err != nil {
		return fmt.Errorf("counting the outbox's rows: %w", err)
	}
	for i, tbl := range tables {
		var size int64
		if err := s.db.QueryRowContext(ctx, `SELECT pg_total_relation_size($1::regclass)`, quoted[i]).Scan(&size); err != nil {
			return fmt.Errorf("reading the size of %s: %w", tbl, err)
		}
		if tbl == t.Outbox {
			w.outboxSize = size
		} else {
			w.logSize += size
		}
	}
	return nil
}

// insertTx inserts the rows from+1..to of insertNumbered's series, pending,
// in a transaction of their own.
func insertTx(ctx context.Context, db *sql.DB, from, to, aggregates int, created string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := insertNumbered(ctx, tx, from, to, aggregates, created, "NULL"); err != nil {
		return err
	}
	return tx.Commit()
}

// dayIDs reads the ids of the rows above after, in id order: what the
// relay would have claimed.
func dayIDs(ctx context.Context, db *sql.DB, after int64) ([]int64, error) {
	rows, err := db.QueryContext(ctx, `SELECT id FROM `+pgsql.QuoteIdent(schema.OutboxTable)+` WHERE id > $1 ORDER BY id`, after)
	if err != nil {
		return nil, fmt.Errorf("reading the day's ids: %w", err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// deliverDay marks ids delivered in batches of retentionBatch, as the
// relay's acks do. Stamping is the relay's UPDATE (fastpath/delivered)
// with delivered_at at the simulated time at instead of now(): the
// cleanup of stamped rows reads delivered_at. The log is the relay's own
// statements: the ids into the log, the floor moved every
// retentionCompactEvery rows and after the last.
func deliverDay(ctx context.Context, db *sql.DB, t outboxdb.Tables, logged bool, ids []int64, at time.Time, sum, compact *time.Duration) error {
	stamp := `UPDATE ` + pgsql.QuoteIdent(t.Outbox) + ` SET delivered_at = $2
	FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async WHERE id = ANY($1)`
	logSQL := t.FastLog()
	for i := 0; i < len(ids); i += retentionBatch {
		batch := ids[i:min(i+retentionBatch, len(ids))]
		var err error
		if logged {
			_, err = timed(ctx, db, sum, logSQL.Delivered, batch)
		} else {
			_, err = timed(ctx, db, sum, stamp, batch, at)
		}
		if err != nil {
			return fmt.Errorf("marking rows delivered: %w", err)
		}
		if end := i + len(batch); logged && (end%retentionCompactEvery == 0 || end == len(ids)) {
			var took time.Duration
			if _, err := timed(ctx, db, &took, logSQL.Compact); err != nil {
				return fmt.Errorf("moving the floor: %w", err)
			}
			*sum += took
			*compact += took
		}
	}
	if logged {
		// Every row delivered: the floor must be over all of them.
		var pending int64
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+pgsql.QuoteIdent(t.Outbox)+` WHERE id > (SELECT upto FROM `+
			pgsql.QuoteIdent(t.DeliveredFloor())+`)`).Scan(&pending); err != nil {
			return fmt.Errorf("reading the floor: %w", err)
		}
		if pending > 0 {
			return fmt.Errorf("%d rows above the floor after the day's deliveries", pending)
		}
	}
	return nil
}

// settleStats waits until the statistics of every session of the sandbox
// reached pg_stat_user_tables: an idle session sends its own after a
// second.
func settleStats(ctx context.Context) error {
	select {
	case <-time.After(2 * time.Second):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// deadTuples sums the dead tuples of tables, as pg_stat_user_tables says.
func deadTuples(ctx context.Context, db *sql.DB, tables []string) (int64, error) {
	var dead int64
	for _, tbl := range tables {
		var d int64
		if err := db.QueryRowContext(ctx, `SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = $1::regclass`,
			pgsql.QuoteIdent(tbl)).Scan(&d); err != nil {
			return 0, fmt.Errorf("reading the dead tuples of %s: %w", tbl, err)
		}
		dead += d
	}
	return dead, nil
}

// print writes the section's two tables.
func (sec *retentionSection) print(out io.Writer) error {
	cfg := sec.cfg
	fmt.Fprintf(out, "\nretained rows: drain of %d events committed before the relay starts, then commit-to-broker latency "+
		"at %d events/s (one event per transaction) for %s, on an empty outbox and beside %s delivered rows retained in the same table "+
		"(stamped for fast; for fastlog delivered_at NULL, under the delivered log's floor), payload %d B\n",
		cfg.Events, cfg.Rate, cfg.LatencyDuration, thousands(int64(cfg.RetentionRows)), payloadSize)
	fmt.Fprintf(out, "machine load average (1 min) %s at the start, %s at the end, on %d CPUs\n", sec.load[0], sec.load[1], runtime.NumCPU())
	tw := tabwriter.NewWriter(out, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "relay\tretained rows\tinserted in\tdrain ev/s\tp50\tp99\tnotes")
	for _, r := range sec.rows {
		inserted := "-"
		if r.retained > 0 && r.res.retainedIn > 0 {
			inserted = fmtDur(r.res.retainedIn, 1)
		}
		if r.res.err != nil {
			fmt.Fprintf(tw, "%s\t%s\tn/a\tn/a\tn/a\tn/a\tn/a (%s)\n", r.key, thousands(int64(r.retained)), firstLine(r.res.err))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.key, thousands(int64(r.retained)), inserted, r.res.drainCell(),
			fmtDur(r.res.latency.p50, r.res.latency.n), fmtDur(r.res.latency.p99, r.res.latency.n), strings.Join(r.res.notes, "; "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "  inserted in: one INSERT ... SELECT of the retained rows (numbered explicitly, the aggregates' counters moved first), "+
		"not counted: the wait, before the relay starts, until every transaction older than the insert's has ended (rows kept for days are "+
		"older than any running one), the floor's move over them (fastlog) and a VACUUM ANALYZE")

	fmt.Fprintf(out, "\na week of traffic: %d simulated days of %s events each (payload %d B, created that day, inserted in transactions of %d), "+
		"marked delivered in statements of %d as each path marks them (fast: UPDATE of delivered_at; fastlog: the ids into the log, "+
		"the floor moved every %s events and at the day's end), then each day relay.CleanupDelivered keeping %d days "+
		"(on the simulated clock) and a plain VACUUM of the path's tables (autovacuum off on them); sizes after the last day\n",
		cfg.RetentionDays, thousands(int64(cfg.RetentionDayEvents)), payloadSize, retentionBatch, retentionBatch,
		thousands(retentionCompactEvery), cfg.RetentionKeep)
	fmt.Fprintf(out, "machine load average (1 min) %s at the start, %s at the end, on %d CPUs\n", sec.wload[0], sec.wload[1], runtime.NumCPU())
	tw = tabwriter.NewWriter(out, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "relay\toutbox on disk\tlog tables\trows\tdead tuples before / after VACUUM\tdeleted\tPostgreSQL time\tinsert\tmark delivered\tof which floor moves\tcleanup\tVACUUM\tnotes")
	for _, w := range sec.week {
		if w.err != nil {
			fmt.Fprintf(tw, "%s%s\tn/a (%s)\n", w.key, strings.Repeat("\tn/a", 11), firstLine(w.err))
			continue
		}
		compact := "-"
		if w.compact > 0 {
			compact = fmtDur(w.compact, 1)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s / %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", w.key, fmtBytes(w.outboxSize), fmtBytes(w.logSize),
			thousands(w.live), thousands(w.deadBefore), thousands(w.deadAfter), thousands(w.deleted), fmtDur(w.total(), 1),
			fmtDur(w.insert, 1), fmtDur(w.deliver, 1), compact, fmtDur(w.cleanup, 1), fmtDur(w.vacuum, 1))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "  PostgreSQL time: the sum of the week's statements, as this bench waited for them (the inserts, the marks, "+
		"the cleanup, the VACUUMs); on disk: pg_total_relation_size (indexes and TOAST included); dead tuples: pg_stat_user_tables, "+
		"the outbox's and the log's")
	return nil
}

// fmtBytes prints a size in MB (or kB below one).
func fmtBytes(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d kB", (n+512)>>10)
	}
	return fmt.Sprintf("%s MB", thousands((n+(1<<19))>>20))
}
