package relay

import (
	"context"

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
		CloseTimeout: c.CloseTimeout, Attributes: attributes(c.Tenant, c.CloudEvents), Logger: c.Logger, Metrics: c.Metrics,
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
