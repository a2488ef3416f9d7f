package relay

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/jackc/pglogrepl"

	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/internal/retention"
	"github.com/entoutbox/entoutbox/schema"
)

// Rows delivered by the WAL path keep delivered_at NULL: marking each would
// be the write per row the path exists to avoid. Instead the relay records
// now and then a snapshot of transactions all delivered, in the table
// <table>_wal_progress, one row per slot:
//
//   - created: the snapshot of the slot's creation (exported by
//     CREATE_REPLICATION_SLOT). Transactions visible in it committed before
//     the slot's start and were never streamed.
//   - delivered: a snapshot taken (pg_current_snapshot(), then
//     pg_current_wal_insert_lsn()) and stored only once the relay had
//     delivered everything up to that position: every transaction visible
//     in it has committed before, so all its rows were acked or
//     dead-lettered.
//
// A row with delivered_at NULL is thus delivered when its transaction is
// visible in delivered and not in created. Cleanup deletes such rows, and
// the backlog does not count them. With no progress row, nothing changes
// for the other paths.

// walProgressTable is the name of table's progress table.
func walProgressTable(table string) string { return table + "_wal_progress" }

func ensureProgressTable(ctx context.Context, db *sql.DB, table string) error {
	_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+pgsql.QuoteIdent(walProgressTable(table))+` (
		slot text PRIMARY KEY,
		created pg_snapshot,
		delivered pg_snapshot,
		confirmed_lsn pg_lsn,
		updated_at timestamptz NOT NULL DEFAULT now())`)
	if err != nil {
		return fmt.Errorf("relay: creating table %q: %w", walProgressTable(table), err)
	}
	return nil
}

// recordSlotCreated stores the snapshot a new slot exported as the slot's
// start, and forgets what was delivered through an earlier slot of the
// name.
func (r *Relay) recordSlotCreated(ctx context.Context, snapshotName string) error {
	tx, err := r.cfg.DB.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SET TRANSACTION SNAPSHOT `+pgsql.QuoteLiteral(snapshotName)); err != nil {
		return fmt.Errorf("importing the slot's snapshot: %w", err)
	}
	var snap string
	if err := tx.QueryRowContext(ctx, `SELECT pg_current_snapshot()::text`).Scan(&snap); err != nil {
		return fmt.Errorf("reading the slot's snapshot: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	snap = normalSnapshot(snap)
	_, err = r.cfg.DB.ExecContext(ctx, `INSERT INTO `+pgsql.QuoteIdent(walProgressTable(r.cfg.Table))+`
		(slot, created, delivered, confirmed_lsn, updated_at) VALUES ($1, $2::pg_snapshot, NULL, NULL, now())
		ON CONFLICT (slot) DO UPDATE SET created = EXCLUDED.created, delivered = NULL, confirmed_lsn = NULL,
			updated_at = now()`, r.cfg.WAL.Slot, snap)
	return err
}

// normalSnapshot fixes the text of a slot's exported snapshot, whose xmin
// may lie past its xmax ("101:100:") when no transaction ran: pg_snapshot
// refuses that. With no transaction in progress it means every
// transaction below xmax is visible, as "100:100:" says.
func normalSnapshot(s string) string {
	parts := strings.SplitN(s, ":", 3)
	if len(parts) != 3 {
		return s
	}
	xmin, err1 := strconv.ParseUint(parts[0], 10, 64)
	xmax, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err1 != nil || err2 != nil || xmin <= xmax || parts[2] != "" {
		return s
	}
	return parts[1] + ":" + parts[1] + ":"
}

// recordWALProgress stores, every ProgressInterval while the relay streams
// and delivers, a snapshot whose transactions are all delivered.
func (r *Relay) recordWALProgress(ctx context.Context, stat *walState) {
	t := time.NewTicker(r.cfg.WAL.ProgressInterval)
	defer t.Stop()
	var (
		candidate     string // a snapshot taken, stored once the position passes at
		at            pglogrepl.LSN
		lastDelivered = int64(-1)
		failing       bool
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pos, active := stat.position()
		if !active {
			candidate = "" // a new session may start from further back
			continue
		}
		var err error
		if candidate != "" && pos >= at {
			if err = r.storeProgress(ctx, candidate, pos); err == nil {
				candidate = ""
			}
		}
		// Only while rows are delivered: an idle relay writes nothing.
		if err == nil && candidate == "" && stat.delivered.Load() != lastDelivered {
			lastDelivered = stat.delivered.Load()
			candidate, at, err = takeSnapshot(ctx, r.cfg.DB)
		}
		if err != nil && ctx.Err() == nil && !failing {
			r.cfg.Logger.Error("Recording the delivered transactions failed; trying again", err,
				watermill.LogFields{"slot": r.cfg.WAL.Slot})
		}
		failing = err != nil
	}
}

// takeSnapshot reads the current snapshot, then the WAL insert position:
// every transaction visible in the snapshot committed before that position.
func takeSnapshot(ctx context.Context, db *sql.DB) (string, pglogrepl.LSN, error) {
	var snap string
	if err := db.QueryRowContext(ctx, `SELECT pg_current_snapshot()::text`).Scan(&snap); err != nil {
		return "", 0, fmt.Errorf("relay: reading the current snapshot: %w", err)
	}
	var lsn pglogrepl.LSN
	if err := db.QueryRowContext(ctx, `SELECT pg_current_wal_insert_lsn()`).Scan(&lsn); err != nil {
		return "", 0, fmt.Errorf("relay: reading the WAL position: %w", err)
	}
	return snap, lsn, nil
}

func (r *Relay) storeProgress(ctx context.Context, snap string, pos pglogrepl.LSN) error {
	_, err := r.cfg.DB.ExecContext(ctx, `INSERT INTO `+pgsql.QuoteIdent(walProgressTable(r.cfg.Table))+`
		(slot, delivered, confirmed_lsn, updated_at) VALUES ($1, $2::pg_snapshot, $3::pg_lsn, now())
		ON CONFLICT (slot) DO UPDATE SET delivered = EXCLUDED.delivered, confirmed_lsn = EXCLUDED.confirmed_lsn,
			updated_at = now()`, r.cfg.WAL.Slot, snap, pos.String())
	if err != nil {
		return fmt.Errorf("relay: storing the delivered transactions: %w", err)
	}
	return nil
}

// walDelivered is the condition that row alias o of the outbox table was
// delivered by the WAL path through progress row alias p (both in scope).
// Its range on transaction_id lets the (transaction_id, id) index serve it.
func walDelivered(o, p string) string {
	x := o + ".transaction_id"
	return p + ".created IS NOT NULL AND " + p + ".delivered IS NOT NULL AND " + o + ".delivered_at IS NULL AND " +
		x + " >= pg_snapshot_xmin(" + p + ".created) AND " + x + " < pg_snapshot_xmax(" + p + ".delivered) AND " +
		"pg_visible_in_snapshot(" + x + ", " + p + ".delivered) AND NOT pg_visible_in_snapshot(" + x + ", " + p + ".created)"
}

// notWALDelivered is the condition that row alias o was not delivered by
// the WAL path, for counting the backlog; "" when table has no progress
// table (no WAL relay ran).
func notWALDelivered(ctx context.Context, db *sql.DB, table, o string) (string, error) {
	progress := walProgressTable(table)
	exists, err := tableExists(ctx, db, progress)
	if err != nil {
		return "", err
	}
	if !exists {
		return "", nil
	}
	return ` AND NOT EXISTS (SELECT 1 FROM ` + pgsql.QuoteIdent(progress) + ` p WHERE ` + walDelivered(o, "p") + `)`, nil
}

// cleanupWALDelivered deletes, batch rows at a time, the rows the WAL path
// delivered that were written before cutoff.
func cleanupWALDelivered(ctx context.Context, db *sql.DB, table string, cutoff time.Time, batch int) (int64, error) {
	progress := walProgressTable(table)
	exists, err := tableExists(ctx, db, progress)
	if err != nil {
		return 0, err
	}
	if !exists {
		return 0, nil
	}
	if batch <= 0 {
		batch = 1000
	}
	t := pgsql.QuoteIdent(table)
	q := `DELETE FROM ` + t + ` WHERE id IN (SELECT o.id FROM ` + t + ` o JOIN ` + pgsql.QuoteIdent(progress) + ` p ON ` +
		walDelivered("o", "p") + ` WHERE o.created_at < $1 LIMIT $2 FOR UPDATE OF o SKIP LOCKED)`
	n, err := retention.InBatches(ctx, db, q, cutoff, batch)
	if err != nil {
		return n, fmt.Errorf("relay: deleting the rows of %s the WAL path delivered: %w", table, err)
	}
	return n, nil
}

// ReadWALSlots reads the slots of the WAL relays of table (schema.OutboxTable
// when empty): those that ever streamed it, from its progress table.
func ReadWALSlots(ctx context.Context, db *sql.DB, table string) ([]WALSlot, error) {
	if table == "" {
		table = schema.OutboxTable
	}
	progress := walProgressTable(table)
	exists, err := tableExists(ctx, db, progress)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, nil
	}
	rows, err := db.QueryContext(ctx, `SELECT p.slot, s.slot_name IS NOT NULL, coalesce(s.active, false),
		coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn), 0)::bigint,
		coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn), 0)::bigint,
		coalesce(s.wal_status, '')
		FROM `+pgsql.QuoteIdent(progress)+` p LEFT JOIN pg_replication_slots s ON s.slot_name = p.slot
		ORDER BY p.slot`)
	if err != nil {
		return nil, fmt.Errorf("relay: reading the replication slots: %w", err)
	}
	defer rows.Close()
	var slots []WALSlot
	for rows.Next() {
		var s WALSlot
		if err := rows.Scan(&s.Slot, &s.Exists, &s.Active, &s.RetainedBytes, &s.LagBytes, &s.WALStatus); err != nil {
			return nil, fmt.Errorf("relay: reading the replication slots: %w", err)
		}
		slots = append(slots, s)
	}
	return slots, rows.Err()
}

// registerSlot makes the slot known to status before anything is
// delivered.
func registerSlot(ctx context.Context, db *sql.DB, table, slot string) error {
	_, err := db.ExecContext(ctx, `INSERT INTO `+pgsql.QuoteIdent(walProgressTable(table))+` (slot) VALUES ($1)
		ON CONFLICT (slot) DO NOTHING`, slot)
	if err != nil {
		return fmt.Errorf("relay: registering slot %q in %s: %w", slot, walProgressTable(table), err)
	}
	return nil
}

// Querier is what WALDelivered and WALDeliveredSQL read through: a
// *sql.DB, a *sql.Tx, or an ent client or transaction.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// tableExists tells whether table name exists (on the search path).
func tableExists(ctx context.Context, q Querier, name string) (bool, error) {
	var exists bool
	if err := queryBool(ctx, q, &exists, `SELECT to_regclass($1) IS NOT NULL`, pgsql.QuoteIdent(name)); err != nil {
		return false, fmt.Errorf("relay: looking for table %q: %w", name, err)
	}
	return exists, nil
}

// WALDelivered tells whether the WAL read path delivered the outbox row id
// of table (schema.OutboxTable when empty). Rows it delivered keep
// delivered_at NULL: what tells them is the snapshots the WAL relay
// recorded. False when no WAL relay ever ran on table.
func WALDelivered(ctx context.Context, q Querier, table string, id int64) (bool, error) {
	if table == "" {
		table = schema.OutboxTable
	}
	progress := walProgressTable(table)
	exists, err := tableExists(ctx, q, progress)
	if err != nil {
		return false, err
	}
	if !exists {
		return false, nil
	}
	var delivered bool
	err = queryBool(ctx, q, &delivered, `SELECT EXISTS (SELECT 1 FROM `+pgsql.QuoteIdent(table)+` o, `+
		pgsql.QuoteIdent(progress)+` p WHERE o.id = $1 AND `+walDelivered("o", "p")+`)`, id)
	if err != nil {
		return false, fmt.Errorf("relay: reading whether the WAL path delivered row %d: %w", id, err)
	}
	return delivered, nil
}

func queryBool(ctx context.Context, q Querier, dst *bool, query string, args ...any) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rows.Scan(dst); err != nil {
		return err
	}
	return rows.Close()
}

// WALDeliveredSQL returns, for the outbox table (schema.OutboxTable when
// empty), a function giving the SQL condition that the row of alias (as
// written in the query, e.g. "outbox_events" or "o") was delivered by the
// WAL path; nil when no WAL relay ever ran on table. Its range on
// transaction_id lets the (transaction_id, id) index serve it.
func WALDeliveredSQL(ctx context.Context, q Querier, table string) (func(alias string) string, error) {
	if table == "" {
		table = schema.OutboxTable
	}
	progress := walProgressTable(table)
	exists, err := tableExists(ctx, q, progress)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, nil
	}
	return func(alias string) string {
		return `EXISTS (SELECT 1 FROM ` + pgsql.QuoteIdent(progress) + ` p WHERE ` + walDelivered(alias, "p") + `)`
	}, nil
}
