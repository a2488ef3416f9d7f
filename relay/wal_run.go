package relay

import (
	"context"
	"fmt"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/relay/internal/walpath"
)

// runWAL runs the WAL path: its source, fed the relay's settings, hands
// rows out to the engine.
func (r *Relay) runWAL(ctx context.Context) error {
	c := r.cfg
	w := walpath.New(walpath.Settings{DB: c.DB, Table: c.Table, DeadLetterTable: c.DeadLetterTable,
		Slot: c.WAL.Slot, Publication: c.WAL.Publication, ReplicationURL: c.WAL.ReplicationURL,
		StatusInterval: c.WAL.StatusInterval, StandbyRetry: c.WAL.StandbyRetry, ProgressInterval: c.WAL.ProgressInterval,
		Concurrency: c.Concurrency, BatchSize: c.BatchSize, MaxBytesInFlight: c.MaxBytesInFlight,
		CloseTimeout: c.CloseTimeout, Attributes: c.CloudEvents.attributes(), Logger: c.Logger, Metrics: c.Metrics,
		Backoff: c.backoff, SlotCreating: r.slotCreating})
	r.wal.Store(w)
	e := r.newEngine(c.Concurrency, walpath.Policy(c.MaxAttempts, c.backoff))
	defer e.Stop(c.CloseTimeout)
	return w.Run(ctx, e)
}

// WALRole is what a WAL relay does now.
type WALRole string

const (
	// WALConnecting: opening the replication connection, or waiting to
	// open it again after it failed.
	WALConnecting WALRole = "connecting"
	// WALActive: streaming the slot.
	WALActive WALRole = "active"
	// WALStandby: another session streams the slot; it tries to take it
	// every StandbyRetry.
	WALStandby WALRole = "standby"
)

// WALStatus is what a relay on the WAL path is doing.
type WALStatus struct {
	Slot string
	Role WALRole
	// Confirmed is the position sent to the server as delivered.
	Confirmed string
	// InFlight counts the rows read and not yet acked or dead-lettered.
	InFlight int
	// Delivered counts the rows acked or dead-lettered since the relay
	// started.
	Delivered int64
}

// WALStatus is the WAL path's status while Run runs it; false otherwise.
func (r *Relay) WALStatus() (WALStatus, bool) {
	w := r.wal.Load()
	if w == nil {
		return WALStatus{}, false
	}
	st := w.Status()
	return WALStatus{Slot: st.Slot, Role: WALRole(st.Role), Confirmed: st.Confirmed, InFlight: st.InFlight,
		Delivered: st.Delivered}, true
}

// Querier is what WALDelivered and WALDeliveredSQL read through: a
// *sql.DB, a *sql.Tx, or an ent client or transaction.
//
// Deprecated: it serves only WALDelivered and WALDeliveredSQL, which are
// deprecated.
type Querier = outboxdb.Querier

// WALDelivered tells whether the WAL read path delivered the outbox row id
// of table (schema.OutboxTable when empty). Rows it delivered keep
// delivered_at NULL: what tells them is the snapshots the WAL relay
// recorded. False when no WAL relay ever ran on table.
//
// Deprecated: the relay's own bookkeeping, not for applications: admin's
// retry and replay and the status read it for you. It stays for one
// release.
func WALDelivered(ctx context.Context, q Querier, table string, id int64) (bool, error) {
	delivered, err := outboxdb.New(table, "").WALDelivered(ctx, q, id)
	if err != nil {
		return false, fmt.Errorf("relay: %w", err)
	}
	return delivered, nil
}

// WALDeliveredSQL returns, for the outbox table (schema.OutboxTable when
// empty), a function giving the SQL condition that the row of alias (as
// written in the query, e.g. "outbox_events" or "o") was delivered by the
// WAL path; nil when no WAL relay ever ran on table. Its range on
// transaction_id lets the (transaction_id, id) index serve it.
//
// Deprecated: the relay's own bookkeeping, not for applications: admin's
// retry and replay and the status read it for you. It stays for one
// release.
func WALDeliveredSQL(ctx context.Context, q Querier, table string) (func(alias string) string, error) {
	d, err := outboxdb.New(table, "").ReadDelivery(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	if !d.WAL() {
		return nil, nil
	}
	return d.ByWAL, nil
}
