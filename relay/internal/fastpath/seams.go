package fastpath

import (
	"context"
	"database/sql"
	"time"
)

// What the relay's tests reach of a fast source, through the relay's
// export_test.go.

// Hooks are seams for the relay's tests (set in its export_test.go before
// Subscribe): each, when set, runs first in what it names, and may block
// it or fail it with an error, as a database that hangs or refuses would.
type Hooks struct {
	Renew     func(context.Context) error // a renewal of the leases by a run loop
	LiveCheck func(context.Context) error // a check that the liveness lock's session is there
	OwnerTx   func(context.Context) error // an ownership transaction, once it holds the lock
	// RescanEvery, when set, replaces the constant: for tests that tell a
	// row woken by its notification from one the rescan found.
	RescanEvery time.Duration
	// CompactEvery, when set, replaces compactEvery.
	CompactEvery time.Duration
}

// BytesHeld is what its subscriptions hold now, as MaxBytesInFlight
// counts it, and the most they held at once.
func (s *Source) BytesHeld() (now, peak int64) { return s.bytesHeld.Load(), s.bytesPeak.Load() }

// ListenerPID is the backend of the session it listens on, 0 while there
// is none.
func (s *Source) ListenerPID() uint32 { return s.notifier.pid() }

// InOwnerLock runs fn inside the ownership transaction of its table, as a
// rebalance does.
func (s *Source) InOwnerLock(ctx context.Context, fn func()) error {
	return s.store.inOwnerLock(ctx, func(*sql.Tx) error { fn(); return nil })
}
