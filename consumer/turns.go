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
// next applies one of its events, and the seqs that wait here.
type turns struct {
	mu      sync.Mutex
	waiting map[turnKey]*turn
}

type turn struct {
	applied chan struct{}
	seqs    map[int64]int // waiting here: how many deliveries of each
}

// wait returns a channel closed when m's aggregate next has an event
// applied here, or when the lowest of its waiting events here stops
// waiting; whether m is that lowest one; and done, to call when m stops
// waiting. Only the lowest looks at the position between two wake-ups:
// the others cannot be applied before it, and a thousand events of one
// aggregate in flight would otherwise each ask the database several times
// a second.
func (t *turns) wait(m events.Meta) (applied <-chan struct{}, lowest bool, done func()) {
	k := turnKeyOf(m)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.waiting == nil {
		t.waiting = map[turnKey]*turn{}
	}
	w := t.waiting[k]
	if w == nil {
		w = &turn{applied: make(chan struct{}), seqs: map[int64]int{}}
		t.waiting[k] = w
	}
	w.seqs[m.AggregateSeq]++
	lowest = true
	for seq := range w.seqs {
		if seq < m.AggregateSeq {
			lowest = false
			break
		}
	}
	return w.applied, lowest, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if w.seqs[m.AggregateSeq]--; w.seqs[m.AggregateSeq] == 0 {
			delete(w.seqs, m.AggregateSeq)
		}
		switch {
		case len(w.seqs) == 0:
			if t.waiting[k] == w {
				delete(t.waiting, k)
			}
		case lowest:
			// The next lowest looks at the position from now on.
			close(w.applied)
			w.applied = make(chan struct{})
		}
	}
}

// applied wakes the deliveries waiting on m's aggregate.
func (t *turns) applied(m events.Meta) {
	if m.AggregateSeq == 0 {
		return // not in an order: nothing waits on it
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if w := t.waiting[turnKeyOf(m)]; w != nil {
		close(w.applied)
		w.applied = make(chan struct{})
	}
}
