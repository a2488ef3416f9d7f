package fastpath

import (
	"sync"
	"time"
)

// Status is what the subscriptions of a fast source do, as their run
// loops last published it (the relay's SubscriberStatus).
type Status struct {
	// Partitions is how many partitions its subscriptions own.
	Partitions int
	// Live tells that every subscription may send: it holds its liveness
	// lock (unless PollOnly) and renewed its leases within two thirds of
	// Lease. False while it has no subscription.
	Live bool
	// Waiting tells that a subscription is a member of its group short of
	// its share, waiting for partitions another relay's lease still holds.
	Waiting bool
}

// subscriptionState is what a subscription's run loop published last: its
// fields are copies, so that Status reads none of the loop's state.
type subscriptionState struct {
	partitions int
	short      bool      // owns fewer than its share
	renewed    time.Time // when its leases were last renewed
	live       *liveness // its lock of life (safe for concurrent use)
}

// subscriberStates holds the last published state of each subscription
// of a fast source.
type subscriberStates struct {
	mu     sync.Mutex
	states map[*Subscription]subscriptionState
}

func (st *subscriberStates) set(sub *Subscription, state subscriptionState) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.states == nil {
		st.states = map[*Subscription]subscriptionState{}
	}
	st.states[sub] = state
}

func (st *subscriberStates) drop(sub *Subscription) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.states, sub)
}

// publishState publishes what the subscription owns, for Status. The run
// loop calls it after each rebalance outcome and after giving everything
// up.
func (sub *Subscription) publishState() {
	sub.s.states.set(sub, subscriptionState{partitions: len(sub.parts.owned), short: sub.parts.short(),
		renewed: sub.renewed, live: sub.live})
}

// Status tells how many partitions the source's subscriptions own and
// whether they may send or wait for partitions. Safe to call at any time
// from any goroutine.
func (s *Source) Status() Status {
	s.states.mu.Lock()
	defer s.states.mu.Unlock()
	out := Status{Live: len(s.states.states) > 0}
	now := time.Now()
	for _, st := range s.states.states {
		// As maySend decides: a renewal older than two thirds of the lease
		// may have lost the partitions.
		fresh := now.Sub(st.renewed) < s.cfg.Lease*2/3
		out.Partitions += st.partitions
		out.Live = out.Live && fresh && st.live.ok()
		out.Waiting = out.Waiting || fresh && st.short
	}
	return out
}
