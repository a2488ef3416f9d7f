package walpath

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/jackc/pglogrepl"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/pgsql"
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
// visible in delivered and not in created (outboxdb.Delivery reads it).
// Cleanup deletes such rows, and the backlog does not count them. With no
// progress row, nothing changes for the other paths.

func ensureProgressTable(ctx context.Context, db *sql.DB, table string) error {
	t := outboxdb.New(table, "")
	progress := t.WALProgress()
	_, err := db.ExecContext(ctx, t.WAL().CreateProgress)
	if err != nil {
		return fmt.Errorf("relay: creating table %q: %w", progress, err)
	}
	return nil
}

// recordSlotCreated stores the snapshot a new slot exported as the slot's
// start, and forgets what was delivered through an earlier slot of the
// name, once it is marked delivered.
func (w *Source) recordSlotCreated(ctx context.Context, snapshotName string) error {
	tx, err := w.cfg.DB.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
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
	// What an earlier slot of the name delivered is marked so before it is
	// forgotten: the new slot's start would take it for pending, and send
	// it again (see catchup.go).
	t := outboxdb.New(w.cfg.Table, "")
	ptx, err := w.cfg.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = ptx.Rollback() }()
	if _, err := t.MarkWALDelivered(ctx, ptx, w.cfg.Slot); err != nil {
		return err
	}
	_, err = ptx.ExecContext(ctx, w.sql.SlotCreated, w.cfg.Slot, snap)
	if err != nil {
		return err
	}
	return ptx.Commit()
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
func (w *Source) recordWALProgress(ctx context.Context, stat *walState) {
	t := time.NewTicker(w.cfg.ProgressInterval)
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
			if err = w.storeProgress(ctx, candidate, pos); err == nil {
				candidate = ""
			}
		}
		// Only while rows are delivered: an idle relay writes nothing.
		if err == nil && candidate == "" && stat.delivered.Load() != lastDelivered {
			lastDelivered = stat.delivered.Load()
			candidate, at, err = takeSnapshot(ctx, w.cfg.DB)
		}
		if err != nil && ctx.Err() == nil && !failing {
			w.cfg.Logger.Error("Recording the delivered transactions failed; trying again", err,
				watermill.LogFields{"slot": w.cfg.Slot})
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

func (w *Source) storeProgress(ctx context.Context, snap string, pos pglogrepl.LSN) error {
	_, err := w.cfg.DB.ExecContext(ctx, w.sql.ProgressSave, w.cfg.Slot, snap, pos.String())
	if err != nil {
		return fmt.Errorf("relay: storing the delivered transactions: %w", err)
	}
	return nil
}

// registerSlot makes the slot known to status before anything is
// delivered.
func registerSlot(ctx context.Context, db *sql.DB, table, slot string) error {
	t := outboxdb.New(table, "")
	progress := t.WALProgress()
	_, err := db.ExecContext(ctx, t.WAL().RegisterSlot, slot)
	if err != nil {
		return fmt.Errorf("relay: registering slot %q in %s: %w", slot, progress, err)
	}
	return nil
}
