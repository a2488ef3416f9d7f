// Package retention deletes old rows in small batches, so that cleaning a
// large table never holds long locks nor one huge transaction. The
// statements are package outboxdb's (outboxdb.DeleteOlder).
package retention

import (
	"context"
	"database/sql"
	"time"
)

// Execer runs the deletes: a *sql.DB, or an ent client. Each batch is a
// statement, and a transaction of its own outside one.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// InBatches runs query, a DELETE of at most $2 rows older than $1, with
// cutoff and batch until it deletes fewer than batch rows, and returns how
// many it deleted in all.
func InBatches(ctx context.Context, db Execer, query string, cutoff time.Time, batch int) (int64, error) {
	var total int64
	for {
		res, err := db.ExecContext(ctx, query, cutoff, batch)
		if err != nil {
			return total, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, err
		}
		total += n
		if n < int64(batch) {
			return total, nil
		}
	}
}
