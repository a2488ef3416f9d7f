// Package tenantread reads the backlog of several tenants' outboxes, the
// schemas of one PostgreSQL database, on one connection: what the relay
// fleet serves as metrics and the console shows per tenant, without a
// pool per tenant.
package tenantread

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// Backlog is what one read found in one tenant's outbox, or why it could
// not be read.
type Backlog struct {
	Err error
	// Pending counts the undelivered rows, at most the read's bound
	// (Capped then: there are at least that many).
	Pending int64
	Capped  bool
	// OldestAge is how long the oldest of them had waited, by the
	// database's clock at the read; 0 when nothing is pending.
	OldestAge time.Duration
	// DeadLetters counts the open dead letters, the relay's and the
	// consumers'; Held the aggregates the consumers hold behind one.
	DeadLetters, Held int64
}

// ReadDatabase reads the backlog of the tenants whose schemas are given
// (one each; "" for the search_path db's URL sets), all of database db,
// on one connection of db: each in its schema as the search_path, as its
// relay connects. The error is the database's, every tenant's; a
// tenant's own (its schema lacks the tables) is in its Backlog.
func ReadDatabase(ctx context.Context, db *sql.DB, t outboxdb.Tables, schemas []string, maxCount int) ([]Backlog, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("connecting to read the backlog: %w", err)
	}
	defer conn.Close()
	var urlPath string
	if err := conn.QueryRowContext(ctx, `SELECT current_setting('search_path')`).Scan(&urlPath); err != nil {
		return nil, fmt.Errorf("reading the search_path: %w", err)
	}
	out := make([]Backlog, len(schemas))
	for i, schema := range schemas {
		path := urlPath
		if schema != "" {
			path = pgsql.QuoteIdent(schema)
		}
		if _, err := conn.ExecContext(ctx, `SELECT set_config('search_path', $1, false)`, path); err != nil {
			out[i].Err = fmt.Errorf("setting the search_path to %s: %w", path, err)
			continue
		}
		out[i] = readTenant(ctx, conn, t, maxCount)
	}
	return out, nil
}

// readTenant reads one tenant's backlog in the connection's search_path.
func readTenant(ctx context.Context, q outboxdb.Querier, t outboxdb.Tables, maxCount int) Backlog {
	p, err := outboxdb.ReadPending(ctx, q, t, maxCount)
	if err != nil {
		return Backlog{Err: err}
	}
	b := Backlog{Pending: p.Count, Capped: p.Capped}
	if !p.Oldest.IsZero() {
		b.OldestAge = max(p.At.Sub(p.Oldest), 0)
	}
	open, err := outboxdb.ReadOpenDeadLetters(ctx, q, t, maxCount)
	if err != nil {
		return Backlog{Err: err}
	}
	b.DeadLetters = open.Relay + open.Consumer
	exists, err := t.TableExists(ctx, q, t.Positions)
	if err != nil {
		return Backlog{Err: fmt.Errorf("looking for the consumer positions: %w", err)}
	}
	if exists {
		held, err := outboxdb.CountHeld(ctx, q, t, maxCount)
		if err != nil {
			return Backlog{Err: fmt.Errorf("counting held aggregates: %w", err)}
		}
		for _, n := range held {
			b.Held += n
		}
	}
	return b
}
