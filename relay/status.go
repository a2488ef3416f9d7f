package relay

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/schema"
)

// Backlog is what the relay still has to do.
type Backlog struct {
	// Pending counts committed events not yet delivered.
	Pending int64
	// OldestPending is when the oldest pending event was written; zero
	// when nothing is pending.
	OldestPending time.Time
	// DeadLetters counts events set aside.
	DeadLetters int64
}

// Age is how long the oldest pending event has waited at now.
func (b Backlog) Age(now time.Time) time.Duration {
	if b.OldestPending.IsZero() {
		return 0
	}
	return now.Sub(b.OldestPending)
}

// ReadBacklog reads the backlog of the outbox table (schema.OutboxTable
// and schema.DeadLetterTable when the names are empty).
func ReadBacklog(ctx context.Context, db *sql.DB, table, deadLetterTable string) (Backlog, error) {
	if table == "" {
		table = schema.OutboxTable
	}
	if deadLetterTable == "" {
		deadLetterTable = schema.DeadLetterTable
	}
	var (
		b      Backlog
		oldest sql.NullTime
	)
	err := db.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM `+pgsql.QuoteIdent(table)+` WHERE delivered_at IS NULL),
		(SELECT min(created_at) FROM `+pgsql.QuoteIdent(table)+` WHERE delivered_at IS NULL),
		(SELECT count(*) FROM `+pgsql.QuoteIdent(deadLetterTable)+`)`).Scan(&b.Pending, &oldest, &b.DeadLetters)
	if err != nil {
		return Backlog{}, fmt.Errorf("reading the outbox backlog: %w", err)
	}
	b.OldestPending = oldest.Time
	return b, nil
}
