package outbox

import (
	"context"
	stdsql "database/sql"
	"errors"
	"fmt"

	"entgo.io/ent/dialect"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// NotifyChannel is the LISTEN/NOTIFY channel of an outbox table. Emit
// notifies it in the emitting transaction, so the wake-up is sent when,
// and only if, the transaction commits; the fast relay listens on it.
func NotifyChannel(table string) string { return outboxdb.NotifyChannel(table) }

// InsertQuery builds the INSERT of rows into table, in their order, as
// Emit writes them (the compatible relay path's schema adapter uses it
// too). A row whose event id is already present is skipped (ON CONFLICT
// DO NOTHING), so that a duplicate does not abort the caller's
// transaction; the statement returns one row per row inserted, and
// notifies NotifyChannel(table) once per row at commit. Rows keep the
// aggregate_seq they carry (Row.AggregateSeq; NULL for 0): it numbers
// none (see InsertNumberedQuery).
func InsertQuery(table string, rows []Row) (string, []any, error) {
	return insertQuery(outboxdb.Tables{Outbox: table}, rows)
}

// InsertNumberedQuery is InsertQuery that also numbers each row in its
// aggregate's order on its topic (aggregate_seq), taking the numbers from
// the counters in seqTable (schema.AggregateSequence) in the same
// statement. The counter rows stay locked until the transaction ends: the
// aggregate's other writers wait, so the numbers have no gaps (a rolled
// back transaction gives its numbers back) and follow commit order. The
// counters are taken in key order, so that two transactions writing the
// same aggregates never wait on each other in a cycle within a statement.
// Rows are inserted in their order, after the numbers are taken, so an
// aggregate's ids follow its numbers too.
func InsertNumberedQuery(table, seqTable string, rows []Row) (string, []any, error) {
	return insertQuery(outboxdb.Tables{Outbox: table, Sequences: seqTable}, rows)
}

// insertQuery is the INSERT of rows into t.Outbox (internal/outboxdb owns
// its text): numbered from t.Sequences when set, skipping a row whose
// event id waits in t.Scheduled when set.
// InsertQueryOn is InsertQuery for the database ent names dialectName
// ("postgres", "mysql", "sqlite3"): on MySQL and SQLite an INSERT that
// skips a duplicate event id, and affects one row per row inserted.
func InsertQueryOn(dialectName, table string, rows []Row) (string, []any, error) {
	d, err := outboxdb.DialectOf(dialectName)
	if err != nil {
		return "", nil, fmt.Errorf("outbox: %w", err)
	}
	if d == outboxdb.Postgres {
		return InsertQuery(table, rows)
	}
	ers, err := emitRows(rows)
	if err != nil {
		return "", nil, err
	}
	w := outboxdb.Tables{Outbox: table, Dialect: d}.EmitWrites(ers) // one write: nothing to number
	return w[0].SQL, w[0].Args, nil
}

func insertQuery(t outboxdb.Tables, rows []Row) (string, []any, error) {
	ers, err := emitRows(rows)
	if err != nil {
		return "", nil, err
	}
	q, args := t.EmitInsert(ers)
	return q, args, nil
}

// emitRows is rows as the statements take them.
func emitRows(rows []Row) ([]outboxdb.EmitRow, error) {
	out := make([]outboxdb.EmitRow, len(rows))
	for i, r := range rows {
		headers, err := encodeHeaders(r.Headers)
		if err != nil {
			return nil, fmt.Errorf("outbox: event %s: %w", r.EventID, err)
		}
		var seq, at any
		if r.AggregateSeq > 0 {
			seq = r.AggregateSeq
		}
		if !r.DeliverAt.IsZero() {
			at = r.DeliverAt
		}
		out[i] = outboxdb.EmitRow{EventID: r.EventID.String(), Name: r.Name, Version: r.Version, Topic: r.Topic,
			AggregateType: r.AggregateType, AggregateID: r.AggregateID, Payload: string(r.Payload), Headers: headers,
			ReadableFrom: readableFromColumn(r.Event), Seq: seq, DeliverAt: at, DeliverAfter: r.DeliverAfter.Microseconds()}
	}
	return out, nil
}

// insert writes rows (in one statement on PostgreSQL). A row whose event
// id is already in the outbox, or waiting in scheduledTable ("" for
// none), fails it with events.ErrDuplicateEventID, the transaction still
// usable.
func insert(ctx context.Context, drv dialect.ExecQuerier, table, seqTable, scheduledTable string, rows []Row) error {
	t, err := tablesFor(drv, outboxdb.Tables{Outbox: table, Sequences: seqTable, Scheduled: scheduledTable})
	if err != nil {
		return err
	}
	ers, err := emitRows(rows)
	if err != nil {
		return err
	}
	if err := emitAhead(ctx, drv, t, ers, false, rows); err != nil {
		return err
	}
	n, err := execWrites(ctx, drv, t.EmitWrites(ers), "writing", rows)
	if err != nil || n == len(rows) {
		return err
	}
	if len(rows) == 1 {
		if seqTable != "" {
			// The transaction goes on: give back the number the duplicate
			// took (the counter is still locked by it).
			r := rows[0]
			var res stdsql.Result
			if err := drv.Exec(ctx, outboxdb.EmitGiveBack.SQL(t), []any{r.Topic, r.AggregateType, r.AggregateID}, &res); err != nil {
				return fmt.Errorf("outbox: giving back the number of duplicate event %s: %w", r.EventID, err)
			}
		}
		return fmt.Errorf("%w: %s (%q)", events.ErrDuplicateEventID, rows[0].EventID, rows[0].Name)
	}
	return fmt.Errorf("%w: %d of %d events were already in the outbox or scheduled", events.ErrDuplicateEventID, len(rows)-n, len(rows))
}

// emitAhead runs what comes before the write of rows (as ers) on MySQL
// (outboxdb's EmitAhead), turning its refusal of an event id in the other
// table into events.ErrDuplicateEventID.
func emitAhead(ctx context.Context, drv dialect.ExecQuerier, t outboxdb.Tables, ers []outboxdb.EmitRow, schedule bool, rows []Row) error {
	err := t.EmitAhead(ctx, drv, ers, schedule)
	if errors.Is(err, outboxdb.ErrDuplicateInOtherTable) {
		return fmt.Errorf("%w: %w", events.ErrDuplicateEventID, err)
	}
	if err != nil {
		doing := "writing"
		if schedule {
			doing = "scheduling"
		}
		return writeError(err, doing, rows)
	}
	return nil
}

// tablesFor is t in the dialect drv speaks (PostgreSQL when it does not
// say); an error names a database the outbox does not run on.
func tablesFor(drv dialect.ExecQuerier, t outboxdb.Tables) (outboxdb.Tables, error) {
	d, ok := drv.(interface{ Dialect() string })
	if !ok {
		return t, nil
	}
	var err error
	if t.Dialect, err = outboxdb.DialectOf(d.Dialect()); err != nil {
		return t, fmt.Errorf("outbox: %w", err)
	}
	return t, nil
}

// execWrites runs writes in order, the last a write of rows that affects
// one row per row written, and returns how many it wrote; doing
// ("writing", "scheduling") names the write in its errors.
func execWrites(ctx context.Context, drv dialect.ExecQuerier, writes []outboxdb.Write, doing string, rows []Row) (int, error) {
	for _, w := range writes[:len(writes)-1] {
		var res stdsql.Result
		if err := drv.Exec(ctx, w.SQL, w.Args, &res); err != nil {
			return 0, writeError(err, doing, rows)
		}
	}
	last := writes[len(writes)-1]
	return execWrite(ctx, drv, last.SQL, last.Args, doing, rows)
}

// execWrite runs query, a write of rows that returns one row per row
// written, and returns how many it wrote; doing ("writing", "scheduling")
// names the write in its errors.
func execWrite(ctx context.Context, drv dialect.ExecQuerier, query string, args []any, doing string, rows []Row) (int, error) {
	var res stdsql.Result
	if err := drv.Exec(ctx, query, args, &res); err != nil {
		return 0, writeError(err, doing, rows)
	}
	if res == nil {
		return 0, errors.New("outbox: the driver returned no result")
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("outbox: counting the rows written: %w", err)
	}
	return int(n), nil
}

// writeError is err, met writing rows, naming them.
func writeError(err error, doing string, rows []Row) error {
	if len(rows) == 1 {
		return fmt.Errorf("outbox: %s %q event %s: %w", doing, rows[0].Name, rows[0].EventID, err)
	}
	return fmt.Errorf("outbox: %s %d events: %w", doing, len(rows), err)
}
