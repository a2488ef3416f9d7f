package relay

import (
	"context"
	"time"

	"github.com/entoutbox/entoutbox/relay/internal/engine"
	"github.com/entoutbox/entoutbox/relay/internal/fastpath"
)

// DeadLetteredLog is what every read path logs for a row it moved to the
// dead letters.
const DeadLetteredLog = engine.DeadLetteredLog

// BytesHeld is what the fast path of r holds now and held at most, as
// MaxBytesInFlight counts it; zero before it runs.
func BytesHeld(r *Relay) (now, peak int64) {
	s := r.fast.Load()
	if s == nil {
		return 0, 0
	}
	return s.BytesHeld()
}

// ListenerPID is the backend of the session s listens on, 0 while there is
// none.
func ListenerPID(s *Subscriber) uint32 { return s.src.ListenerPID() }

// SetRescanEvery makes s's subscriptions rescan every d instead of every
// second; call it before Subscribe.
func SetRescanEvery(s *Subscriber, d time.Duration) { s.src.Hooks.RescanEvery = d }

// InOwnerLock runs fn inside the ownership transaction of s's table, as a
// rebalance does.
func InOwnerLock(ctx context.Context, s *Subscriber, fn func()) error {
	return s.src.InOwnerLock(ctx, fn)
}

// OnRenew makes every renewal of the leases by s's run loops call fn
// before it begins: fn may hold it back as long as it likes (as a stalled
// process or a database that hangs would: the leases run from the renewal
// before), and an error from it fails the renewal. Set it before
// Subscribe.
func OnRenew(s *Subscriber, fn func(context.Context) error) { s.src.Hooks.Renew = fn }

// OnLivenessCheck makes every check of s's liveness sessions call fn
// first, as OnRenew does for renewals. Set it before Subscribe.
func OnLivenessCheck(s *Subscriber, fn func(context.Context) error) { s.src.Hooks.LiveCheck = fn }

// OnOwnerTx makes every ownership transaction of s (the first join, the
// rebalances) call fn once it holds the lock, before its statements. Set
// it before Subscribe.
func OnOwnerTx(s *Subscriber, fn func(context.Context) error) { s.src.Hooks.OwnerTx = fn }

// SubscriberBytesHeld is what s's subscriptions hold now, as
// MaxBytesInFlight counts it.
func SubscriberBytesHeld(s *Subscriber) int64 {
	now, _ := s.src.BytesHeld()
	return now
}

// LiveStale is how old a subscription's last confirmation of its liveness
// lock may be for it to send.
const LiveStale = fastpath.LiveStale

// OnRelayRenew is OnRenew for the fast Subscriber of r. Set it before Run.
func OnRelayRenew(r *Relay, fn func(context.Context) error) { r.fastHooks.Renew = fn }

// OnRelayLivenessCheck is OnLivenessCheck for the fast Subscriber of r.
// Set it before Run.
func OnRelayLivenessCheck(r *Relay, fn func(context.Context) error) { r.fastHooks.LiveCheck = fn }

// OnSlotCreating makes the WAL path of r call fn right before it creates
// its slot. Set it before Run.
func OnSlotCreating(r *Relay, fn func()) { r.slotCreating = fn }

// SetPromoteBatch bounds the events one promotion of r's moves; call it
// before Run.
func SetPromoteBatch(r *Relay, n int) { r.promoteBatch = n }
