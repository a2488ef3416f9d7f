// Package retention deletes old rows in small batches, so that cleaning a
// large table never holds long locks nor one huge transaction.
package retention

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// Execer runs the deletes: a *sql.DB, or an ent client. Each batch is a
// statement, and a transaction of its own outside one.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Delete removes rows of table whose timeColumn is before cutoff, batch
// rows per statement, oldest id first, until none is left or ctx ends. Rows
// age in id order, so walking the primary key finds them without an index
// of their own. It skips rows locked by others (they are picked up by the
// next run) and returns how many rows it deleted.
func Delete(ctx context.Context, db Execer, table, timeColumn string, cutoff time.Time, batch int) (int64, error) {
	if batch <= 0 {
		batch = 1000
	}
	q := fmt.Sprintf(`DELETE FROM %[1]s WHERE id IN (
		SELECT id FROM %[1]s WHERE %[2]s < $1 ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)`,
		pgsql.QuoteIdent(table), pgsql.QuoteIdent(timeColumn))
	n, err := InBatches(ctx, db, q, cutoff, batch)
	if err != nil {
		return n, fmt.Errorf("deleting old rows of %s: %w", table, err)
	}
	return n, nil
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
