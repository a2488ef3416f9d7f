package consumer

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/schema"
)

// CleanupProcessed deletes processed-event records older than retain, in
// batches of batch rows (1000 when zero). A record must outlive the longest
// time a broker may still redeliver its event; a week is a safe default.
// table is schema.ProcessedEventTable when empty.
func CleanupProcessed(ctx context.Context, db *sql.DB, table string, retain time.Duration, batch int) (int64, error) {
	// A negative retention would put the cut-off in the future and delete
	// every record: redelivered events would then be handled again.
	if retain < 0 {
		return 0, fmt.Errorf("consumer: processed retention must not be negative, not %s", retain)
	}
	if table == "" {
		table = schema.ProcessedEventTable
	}
	t := outboxdb.Tables{Dialect: outboxdb.DialectOfDB(db)}
	return t.DeleteOlder(ctx, db, table, "processed_at", time.Now().Add(-retain), batch)
}
