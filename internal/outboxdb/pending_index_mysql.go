package outboxdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"
)

// The undelivered rows' index on MySQL. On PostgreSQL and SQLite the
// schema's pending index is partial (WHERE delivered_at IS NULL): it holds
// the undelivered rows alone. MySQL has no partial index, so there that
// index holds every id, and a read of the undelivered rows walks the
// table's rows, payloads and all, past every delivered one still kept: a
// pass of the relay, or status's count, grew with the retention. An index
// on (delivered_at, id) finds the undelivered rows in id order at once.
// ent's schema cannot give one database an index of its own, so the relay
// makes it on MySQL when it starts (EnsurePendingIndex).

// PendingIndex is the name of the undelivered rows' index on MySQL.
func (t Tables) PendingIndex() string { return t.Outbox + "_undelivered" }

var (
	// pendingIndexExists tells whether the outbox table ?1 has the index ?2.
	pendingIndexExists = defineOnly("pending-index/exists", MySQL, func(Tables) string {
		return `SELECT EXISTS (SELECT 1 FROM information_schema.statistics
		WHERE table_schema = DATABASE() AND table_name = ?1 AND index_name = ?2)`
	})
	// pendingIndexCreate makes the index, without blocking the writes to
	// the table while it is built (InnoDB's online DDL).
	pendingIndexCreate = defineOnly("pending-index/create", MySQL, func(t Tables) string {
		return `CREATE INDEX ` + MySQL.quote(t.PendingIndex()) + ` ON ` + MySQL.quote(t.Outbox) +
			` (delivered_at, id) ALGORITHM=INPLACE LOCK=NONE`
	})
)

// EnsurePendingIndex makes the undelivered rows' index on MySQL when the
// outbox lacks it: created reports whether this call made it. It does
// nothing on the other databases.
func (t Tables) EnsurePendingIndex(ctx context.Context, db *sql.DB) (created bool, err error) {
	if t.Dialect != MySQL {
		return false, nil
	}
	q := BoundSQL(db, MySQL)
	var exists bool
	if err := q.QueryRowContext(ctx, pendingIndexExists.SQL(t), t.Outbox, t.PendingIndex()).Scan(&exists); err != nil {
		return false, fmt.Errorf("looking for the index %s: %w", t.PendingIndex(), err)
	}
	if exists {
		return false, nil
	}
	if _, err := db.ExecContext(ctx, pendingIndexCreate.SQL(t)); err != nil {
		var my *mysql.MySQLError
		if errors.As(err, &my) && my.Number == 1061 { // another relay made it meanwhile
			return false, nil
		}
		return false, fmt.Errorf("creating the index %s on %s (delivered_at, id): %w", t.PendingIndex(), t.Outbox, err)
	}
	return true, nil
}
