package relay

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// CleanupDelivered deletes outbox rows delivered more than retain ago, in
// batches of batch rows (1000 when zero). Undelivered rows are never
// touched. table is schema.OutboxTable when empty. Cancelled scheduled
// events are removed by CleanupCancelled.
//
// Rows the WAL path delivered keep delivered_at NULL; they are deleted when
// written more than retain ago and their transaction is in the last
// snapshot a WAL relay recorded as delivered (see PathWAL). Without a WAL
// relay's progress table this does what it always did. Rows a fast relay
// with a delivered log (FastConfig.DeliveredLog) delivered keep
// delivered_at NULL too; they are deleted when written more than retain
// ago.
func CleanupDelivered(ctx context.Context, db *sql.DB, table string, retain time.Duration, batch int) (int64, error) {
	if retain < 0 {
		// It would reach into the future: every delivered row, however recent.
		return 0, fmt.Errorf("relay: delivered retention must not be negative, not %s", retain)
	}
	t := outboxdb.New(table, "")
	t.Dialect = dialectOf(db)
	cutoff := time.Now().Add(-retain)
	n, err := t.DeleteOlder(ctx, db, t.Outbox, "delivered_at", cutoff, batch)
	if err != nil || t.Dialect != outboxdb.Postgres { // the WAL path is PostgreSQL's
		return n, err
	}
	viaWAL, err := t.DeleteWALDelivered(ctx, db, cutoff, batch)
	n += viaWAL
	if err != nil {
		return n, fmt.Errorf("relay: %w", err)
	}
	viaLog, err := t.DeleteLogDelivered(ctx, db, cutoff, batch)
	n += viaLog
	if err != nil {
		return n, fmt.Errorf("relay: %w", err)
	}
	return n, nil
}

// CleanupCancelled deletes the scheduled events cancelled more than retain
// ago (events.Cancel keeps them to be seen), in batches of batch rows
// (1000 when zero), as CleanupDelivered deletes delivered rows: run both
// with one retention. Waiting events are never touched. table is
// schema.ScheduledEventTable when empty; without it nothing is deleted.
func CleanupCancelled(ctx context.Context, db *sql.DB, table string, retain time.Duration, batch int) (int64, error) {
	if retain < 0 {
		return 0, fmt.Errorf("relay: cancelled retention must not be negative, not %s", retain)
	}
	t := outboxdb.New("", "")
	t.Dialect = dialectOf(db)
	if table != "" {
		t.Scheduled = table
	}
	n, err := t.DeleteCancelled(ctx, db, time.Now().Add(-retain), batch)
	if err != nil {
		return n, fmt.Errorf("relay: %w", err)
	}
	return n, nil
}
