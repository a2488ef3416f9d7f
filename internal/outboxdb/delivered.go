package outboxdb

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/internal/retention"
)

// A row is delivered when a read path says so, each its own way:
//
//   - the fast and compatible paths set delivered_at (the fast path with
//     Delete removes the row instead);
//   - the WAL path leaves delivered_at NULL (marking each row would be the
//     write per row it exists to avoid) and records, per slot, in
//     Tables.WALProgress, the snapshot of the slot's start (created) and
//     now and then one whose transactions were all delivered (delivered).
//     A row is delivered when its transaction is visible in delivered and
//     not in created.

// walDelivered is the condition that row alias o of the outbox table was
// delivered by the WAL path through progress row alias p (both in scope).
// Its range on transaction_id lets the (transaction_id, id) index serve it.
func walDelivered(o, p string) string {
	x := o + ".transaction_id"
	return p + ".created IS NOT NULL AND " + p + ".delivered IS NOT NULL AND " + o + ".delivered_at IS NULL AND " +
		x + " >= pg_snapshot_xmin(" + p + ".created) AND " + x + " < pg_snapshot_xmax(" + p + ".delivered) AND " +
		"pg_visible_in_snapshot(" + x + ", " + p + ".delivered) AND NOT pg_visible_in_snapshot(" + x + ", " + p + ".created)"
}

// Delivery gives the SQL conditions that tell the delivered rows of an
// outbox from the pending ones, by every path that ran on it. Each takes
// the outbox row's alias as the query writes it ("o", or a quoted table
// name).
type Delivery struct {
	progress string // the WAL progress table; "" while no WAL relay ran
	// log is the outbox's tables when a fast relay keeps a delivered log
	// on it (FastLogged); nil otherwise.
	log *Tables
}

// ReadDelivery looks up which paths have marks to read on t: the WAL
// path's progress table exists once a WAL relay ran, the fast path's
// delivered log once a fast relay kept one.
func (t Tables) ReadDelivery(ctx context.Context, q Querier) (Delivery, error) {
	if t.Dialect != Postgres {
		return Delivery{}, nil // the WAL path and the log are PostgreSQL's
	}
	var d Delivery
	exists, err := TableExists(ctx, q, t.WALProgress())
	if err != nil {
		return Delivery{}, err
	}
	if exists {
		d.progress = t.WALProgress()
	}
	logged, err := t.HasDeliveredLog(ctx, q)
	if err != nil {
		return Delivery{}, err
	}
	if logged {
		d.log = &t
	}
	return d, nil
}

// Logged is the fast path's delivered log's condition that row o was
// delivered; FALSE while no fast relay kept one.
func (d Delivery) Logged(o string) string {
	if d.log == nil {
		return "FALSE"
	}
	return d.log.FastLogged(o)
}

// WAL tells whether a WAL relay ever ran on the outbox.
func (d Delivery) WAL() bool { return d.progress != "" }

// Stamped is the fast and compatible paths' condition that row o was
// delivered.
func Stamped(o string) string { return o + ".delivered_at IS NOT NULL" }

// ByWAL is the WAL path's condition that row o was delivered; FALSE while
// no WAL relay ran.
func (d Delivery) ByWAL(o string) string {
	if d.progress == "" {
		return "FALSE"
	}
	return `EXISTS (SELECT 1 FROM ` + pgsql.QuoteIdent(d.progress) + ` wp WHERE ` + walDelivered(o, "wp") + `)`
}

// Delivered is the condition that row o was delivered, by any path.
func (d Delivery) Delivered(o string) string {
	conds := []string{Stamped(o)}
	if d.progress != "" {
		conds = append(conds, d.ByWAL(o))
	}
	if d.log != nil {
		conds = append(conds, d.Logged(o))
	}
	if len(conds) == 1 {
		return conds[0]
	}
	return "(" + strings.Join(conds, " OR ") + ")"
}

// Pending is the condition that committed row o was delivered by no path.
// Its delivered_at test lets the outbox's partial index of undelivered
// rows serve it.
func (d Delivery) Pending(o string) string {
	out := o + ".delivered_at IS NULL"
	if d.progress != "" {
		out += " AND NOT " + d.ByWAL(o)
	}
	if d.log != nil {
		out += " AND NOT " + d.Logged(o)
	}
	return out
}

// WALDelivered tells whether the WAL path delivered the outbox row id;
// false when no WAL relay ever ran on t.
func (t Tables) WALDelivered(ctx context.Context, q Querier, id int64) (bool, error) {
	d, err := t.ReadDelivery(ctx, q)
	if err != nil || !d.WAL() {
		return false, err
	}
	var delivered bool
	err = queryRow(ctx, q, deliveredByWAL.SQL(t), []any{id}, &delivered)
	if err != nil {
		return false, fmt.Errorf("reading whether the WAL path delivered row %d: %w", id, err)
	}
	return delivered, nil
}

// MarkWALDelivered sets delivered_at on the rows the WAL path's progress
// row of slot says it delivered, before that row is reset for a new slot
// of the name (whose start would take them for pending), and returns how
// many it marked.
func (t Tables) MarkWALDelivered(ctx context.Context, e Execer, slot string) (int64, error) {
	res, err := e.ExecContext(ctx, deliveredMarkWAL.SQL(t), slot)
	if err != nil {
		return 0, fmt.Errorf("marking the rows slot %q delivered in %s: %w", slot, t.Outbox, err)
	}
	return res.RowsAffected()
}

// DeleteWALDelivered deletes, batch rows at a time (1000 when zero), the
// rows the WAL path delivered that were written before cutoff.
func (t Tables) DeleteWALDelivered(ctx context.Context, db *sql.DB, cutoff time.Time, batch int) (int64, error) {
	d, err := t.ReadDelivery(ctx, db)
	if err != nil || !d.WAL() {
		return 0, err
	}
	return t.deleteDelivered(ctx, db, deliveredDeleteWAL.SQL(t), cutoff, batch, "the WAL path")
}

// deleteDelivered runs query, the deletion of up to $2 rows delivered by
// path (a path that leaves delivered_at NULL) and written before $1, until
// it deletes none, batch rows at a time (1000 when zero).
func (t Tables) deleteDelivered(ctx context.Context, db *sql.DB, query string, cutoff time.Time, batch int, path string) (int64, error) {
	if batch <= 0 {
		batch = 1000
	}
	n, err := retention.InBatches(ctx, db, query, cutoff, batch)
	if err != nil {
		return n, fmt.Errorf("deleting the rows of %s %s delivered: %w", t.Outbox, path, err)
	}
	return n, nil
}

// The WAL path's statements on what it delivered, read once a WAL relay
// ran (the progress table exists).
var (
	// deliveredByWAL tells whether the WAL path delivered row $1.
	deliveredByWAL = define("delivered/by-wal", func(t Tables) string {
		d := Delivery{progress: t.WALProgress()}
		return `SELECT EXISTS (SELECT 1 FROM ` + pgsql.QuoteIdent(t.Outbox) + ` o WHERE o.id = $1 AND ` +
			d.ByWAL("o") + `)`
	})
	// deliveredMarkWAL stamps the rows slot $1's progress row delivered.
	deliveredMarkWAL = define("delivered/mark-wal", func(t Tables) string {
		return `UPDATE ` + pgsql.QuoteIdent(t.Outbox) + ` o SET delivered_at = now() FROM ` +
			pgsql.QuoteIdent(t.WALProgress()) + ` p WHERE p.slot = $1 AND ` + walDelivered("o", "p")
	})
	// deliveredDeleteWAL deletes up to $2 rows the WAL path delivered
	// that were written before $1.
	deliveredDeleteWAL = define("delivered/delete-wal", func(t Tables) string {
		o := pgsql.QuoteIdent(t.Outbox)
		return `DELETE FROM ` + o + ` WHERE id IN (SELECT o.id FROM ` + o + ` o JOIN ` + pgsql.QuoteIdent(t.WALProgress()) + ` p ON ` +
			walDelivered("o", "p") + ` WHERE o.created_at < $1 LIMIT $2 FOR UPDATE OF o SKIP LOCKED)`
	})
)
