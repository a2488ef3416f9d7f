package consumer

// Waking the deliveries that wait for their aggregate's previous event
// (wait.go) when this handler set applies an event of the aggregate: a run
// of one aggregate's events in flight in one instance then goes at the
// pace of its commits, not of the pauses between two looks at the
// position. An event another instance applies is seen at the next look.

import (
	"sync"

	"github.com/entoutbox/entoutbox/events"
)

type turnKey struct{ consumer, topic, aggregateType, aggregateID string }

func turnKeyOf(m events.Meta) turnKey {
	return turnKey{m.Consumer, m.Topic, m.AggregateType, m.AggregateID}
}

// turns holds, per aggregate waited on, a channel closed when this set
// next applies one of its events.
type turns struct {
	mu      sync.Mutex
	waiting map[turnKey]*turn
}

type turn struct {
	applied chan struct{}
	waiters int
}

// wait returns a channel closed when m's aggregate next has an event
// applied here, and done, to call when the caller stops waiting.
func (t *turns) wait(m events.Meta) (applied <-chan struct{}, done func()) {
	k := turnKeyOf(m)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.waiting == nil {
		t.waiting = map[turnKey]*turn{}
	}
	w := t.waiting[k]
	if w == nil {
		w = &turn{applied: make(chan struct{})}
		t.waiting[k] = w
	}
	w.waiters++
	return w.applied, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if w.waiters--; w.waiters == 0 && t.waiting[k] == w {
			delete(t.waiting, k)
		}
	}
}

// applied wakes the deliveries waiting on m's aggregate.
func (t *turns) applied(m events.Meta) {
	if m.AggregateSeq == 0 {
		return // not in an order: nothing waits on it
	}
	k := turnKeyOf(m)
	t.mu.Lock()
	defer t.mu.Unlock()
	if w := t.waiting[k]; w != nil {
		close(w.applied)
		delete(t.waiting, k)
	}
}
