package consumer

// What a waiting delivery takes from the others. A subscriber that holds
// many messages itself (NATS, ?max_in_flight=) pulls another one from the
// broker as soon as it has a free slot: while one of its slots is free, a
// delivery waiting for its aggregate's previous event keeps no other event
// out. It is not nacked early for them (wait.go), and is nacked only once
// its aggregate has not moved for freeSlotGapWaits GapWaits: in case the
// broker holds its predecessor back for a limit of its own (NATS
// max_ack_pending, the messages all instances hold).

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// freeSlotGapWaits is how many GapWaits a delivery waits without its
// aggregate moving while its subscription has a free slot.
const freeSlotGapWaits = 4

// subscriberSlots counts the messages of one subscription being handled.
type subscriberSlots struct {
	max  int
	used atomic.Int64
}

type subscriberSlotsKey struct{}

// slotsOf returns the slots of a subscription of sub, nil when sub hands
// out one message at a time (a waiting delivery then holds all it has).
func slotsOf(sub message.Subscriber) *subscriberSlots {
	c, ok := sub.(concurrentSubscriber)
	if !ok || c.MaxInFlight() <= 1 {
		return nil
	}
	return &subscriberSlots{max: c.MaxInFlight()}
}

// hold counts a message being handled with ctx until done; the returned
// context carries the slots.
func (s *subscriberSlots) hold(ctx context.Context) (_ context.Context, done func()) {
	if s == nil {
		return ctx, func() {}
	}
	s.used.Add(1)
	return context.WithValue(ctx, subscriberSlotsKey{}, s), func() { s.used.Add(-1) }
}

// gapWait is how long a delivery handled with ctx waits without its
// aggregate moving before it is nacked.
func (s *Set) gapWait(ctx context.Context) time.Duration {
	if freeSlot(ctx) {
		return freeSlotGapWaits * s.cfg.GapWait
	}
	return s.cfg.GapWait
}

// freeSlot reports whether the subscription that delivered the message
// handled with ctx has a free slot.
func freeSlot(ctx context.Context) bool {
	s, _ := ctx.Value(subscriberSlotsKey{}).(*subscriberSlots)
	return s != nil && s.used.Load() < int64(s.max)
}

// fullWindow reports whether the subscription that delivered the message
// handled with ctx holds as many messages as it may: it pulls no more
// until one leaves.
func fullWindow(ctx context.Context) bool {
	s, _ := ctx.Value(subscriberSlotsKey{}).(*subscriberSlots)
	return s != nil && s.used.Load() >= int64(s.max)
}

// slotted reports whether the message handled with ctx came from a
// subscription that holds many messages itself.
func slotted(ctx context.Context) bool {
	s, _ := ctx.Value(subscriberSlotsKey{}).(*subscriberSlots)
	return s != nil
}
