package outbox

import (
	"context"
	stdsql "database/sql"
	"errors"
	"fmt"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// ScheduledChannel is the LISTEN/NOTIFY channel of a scheduled events
// table: Emit notifies it at commit when it scheduled an event, so that
// the relay looks again for the next one due (it may be due sooner than
// the one it waits for).
func ScheduledChannel(table string) string { return outboxdb.ScheduledChannel(table) }

// InsertScheduledQuery builds the INSERT of scheduled rows into
// scheduledTable, in their order. Each is due at its DeliverAt, or at the
// database's clock plus DeliverAfter. A row whose event id is already
// scheduled or in outboxTable is skipped; the statement returns one row per
// row inserted, and notifies ScheduledChannel(scheduledTable) at commit.
//
// With seqTable, the counters of the rows' aggregates are locked (created
// at 0 when new) without taking a number: the aggregate's other writers
// wait until the transaction ends, so that the ids, which order events due
// at the same time, follow commit order within an aggregate. The number
// is taken when the event is due.
func InsertScheduledQuery(outboxTable, seqTable, scheduledTable string, rows []Row) (string, []any, error) {
	ers, err := emitRows(rows)
	if err != nil {
		return "", nil, err
	}
	q, args := outboxdb.Tables{Outbox: outboxTable, Sequences: seqTable, Scheduled: scheduledTable}.EmitSchedule(ers)
	return q, args, nil
}

// insertScheduled writes scheduled rows (in one statement on
// PostgreSQL), as insert does the others.
func insertScheduled(ctx context.Context, drv dialect.ExecQuerier, outboxTable, seqTable, scheduledTable string, rows []Row) error {
	t, err := tablesFor(drv, outboxdb.Tables{Outbox: outboxTable, Sequences: seqTable, Scheduled: scheduledTable})
	if err != nil {
		return err
	}
	ers, err := emitRows(rows)
	if err != nil {
		return err
	}
	if err := emitAhead(ctx, drv, t, ers, true, rows); err != nil {
		return err
	}
	n, err := execWrites(ctx, drv, t.ScheduleWrites(ers, time.Now()), "scheduling", rows)
	if err != nil || n == len(rows) {
		return err
	}
	if len(rows) == 1 {
		return fmt.Errorf("%w: %s (%q)", events.ErrDuplicateEventID, rows[0].EventID, rows[0].Name)
	}
	return fmt.Errorf("%w: %d of %d events were already scheduled or in the outbox", events.ErrDuplicateEventID, len(rows)-n, len(rows))
}

// Cancel stops the scheduled event id, in the transaction (or on the
// connection) of drv: events.Cancelled when it was waiting,
// events.AlreadyCancelled, events.TooLate when it is in the outbox
// (due, or never scheduled), and events.ErrEventNotFound when it is in
// neither table. A Cancel that meets the relay moving the event into the
// outbox waits for it (row lock) and then finds it too late; the relay
// skips an event whose Cancel has not ended, and moves it once that
// transaction rolls back.
func Cancel(ctx context.Context, drv dialect.ExecQuerier, outboxTable, scheduledTable string, id uuid.UUID) (events.CancelResult, error) {
	if scheduledTable == "" {
		return 0, errors.New("outbox: Cancel needs the scheduled events' table: add type ScheduledEvent struct{ schema.ScheduledEvent } " +
			"to your ent schema, run go generate and migrate")
	}
	t, err := tablesFor(drv, outboxdb.Tables{Outbox: outboxTable, Scheduled: scheduledTable})
	if err != nil {
		return 0, err
	}
	drv = outboxdb.Bound(drv, t.Dialect)
	var res stdsql.Result
	if err := drv.Exec(ctx, outboxdb.EmitCancel.SQL(t), []any{id.String()}, &res); err != nil {
		if errors.Is(err, stdsql.ErrTxDone) {
			err = ErrTxEnded
		}
		return 0, fmt.Errorf("outbox: cancelling event %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return 0, fmt.Errorf("outbox: cancelling event %s: %w", id, err)
	} else if n == 1 {
		return events.Cancelled, nil
	}
	// A statement of its own: in READ COMMITTED it sees what the relay
	// committed while the UPDATE waited for its lock.
	var rows entsql.Rows
	if err := drv.Query(ctx, outboxdb.EmitCancelFind.SQL(t), []any{id.String()}, &rows); err != nil {
		return 0, fmt.Errorf("outbox: looking for event %s: %w", id, err)
	}
	defer rows.Close()
	var cancelled, sent bool
	if !rows.Next() {
		return 0, fmt.Errorf("outbox: looking for event %s: no row", id)
	}
	if err := rows.Scan(&cancelled, &sent); err != nil {
		return 0, fmt.Errorf("outbox: looking for event %s: %w", id, err)
	}
	switch {
	case cancelled:
		return events.AlreadyCancelled, nil
	case sent:
		return events.TooLate, nil
	}
	return 0, fmt.Errorf("%w: %s", events.ErrEventNotFound, id)
}
