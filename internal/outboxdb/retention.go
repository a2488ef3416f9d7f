package outboxdb

import (
	"context"
	"fmt"
	"time"

	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/internal/retention"
)

// The cleanups' deletes of old rows (delivered outbox rows, processed
// events, settled dead letters), as the delivered rows' one reads.
var _ = define("retention/delete-older", func(t Tables) string { return deleteOlder(t.Outbox, "delivered_at") })

// deleteOlder deletes at most $2 rows of table whose timeColumn is before
// $1, oldest id first, skipping rows locked by others.
func deleteOlder(table, timeColumn string) string {
	return fmt.Sprintf(`DELETE FROM %[1]s WHERE id IN (
		SELECT id FROM %[1]s WHERE %[2]s < $1 ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)`,
		pgsql.QuoteIdent(table), pgsql.QuoteIdent(timeColumn))
}

// DeleteOlder removes rows of table whose timeColumn is before cutoff,
// batch rows per statement (1000 when not positive), oldest id first,
// until none is left or ctx ends. Rows age in id order, so walking the
// primary key finds them without an index of their own. It skips rows
// locked by others (they are picked up by the next run) and returns how
// many rows it deleted.
func DeleteOlder(ctx context.Context, e Execer, table, timeColumn string, cutoff time.Time, batch int) (int64, error) {
	if batch <= 0 {
		batch = 1000
	}
	n, err := retention.InBatches(ctx, e, deleteOlder(table, timeColumn), cutoff, batch)
	if err != nil {
		return n, fmt.Errorf("deleting old rows of %s: %w", table, err)
	}
	return n, nil
}
