package consumer

// Waking the deliveries that wait for their aggregate's previous event
// (wait.go) when this handler set applies an event of the aggregate: a run
// of one aggregate's events in flight in one instance then goes at the
// pace of its commits, not of the pauses between two looks at the
// position; and when another instance applies one (wake.go).

import (
	"slices"
	"sync"
	"time"

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
	// held counts, per aggregate, the deliveries of each seq this set
	// handles now, waiting or not: a gap whose missing events are all
	// here is filled here, without a look at the position.
	held map[turnKey]map[int64]int
	// left is told when a held delivery leaves (nil: nothing to tell).
	left func(turnKey)
	// progressed is told of each event applied here, and of each move
	// of a position another instance notified (nil: nothing to tell).
	progressed func(consumer, topic string)
}

// hold counts m among the deliveries this set handles until release.
func (t *turns) hold(m events.Meta) (release func()) {
	k := turnKeyOf(m)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held == nil {
		t.held = map[turnKey]map[int64]int{}
	}
	seqs := t.held[k]
	if seqs == nil {
		seqs = map[int64]int{}
		t.held[k] = seqs
	}
	seqs[m.AggregateSeq]++
	return func() {
		t.mu.Lock()
		if seqs[m.AggregateSeq]--; seqs[m.AggregateSeq] == 0 {
			delete(seqs, m.AggregateSeq)
		}
		if len(seqs) == 0 { // the map is t.held[k] until it is empty
			delete(t.held, k)
		}
		left := t.left
		t.mu.Unlock()
		if left != nil {
			left(k)
		}
	}
}

// covered reports whether every seq of m's aggregate from from up to m's
// is handled by this set now: m waits on no other instance.
func (t *turns) covered(m events.Meta, from int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	seqs := t.held[turnKeyOf(m)]
	if from >= m.AggregateSeq || m.AggregateSeq-from > int64(len(seqs)) {
		return from >= m.AggregateSeq
	}
	for seq := from; seq < m.AggregateSeq; seq++ {
		if seqs[seq] == 0 {
			return false
		}
	}
	return true
}

type turn struct {
	applied chan struct{}
	seqs    map[int64]int // waiting here: how many deliveries of each
	moved   positionMove  // the latest move a wake told of
	movedAt time.Time     // when a wake last told of a move, or the first one began to wait
	// The latest shedding round (shed): the seqs from shedFrom on leave
	// until shedUntil; 0: none.
	shedFrom  int64
	shedUntil time.Time
}

// positionMove is what a wake tells of the position it moved.
type positionMove struct {
	last int64 // its last_seq after the move
	// told: the move came from a notification, which tells the mark after
	// the move too (0: none); a commit of this set tells only last.
	told bool
	mark int64
}

// join adds m to the deliveries waiting on its aggregate here, until
// leave.
func (t *turns) join(m events.Meta) *turnWaiter {
	k := turnKeyOf(m)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.waiting == nil {
		t.waiting = map[turnKey]*turn{}
	}
	w := t.waiting[k]
	if w == nil {
		w = &turn{applied: make(chan struct{}), seqs: map[int64]int{}, movedAt: time.Now()}
		t.waiting[k] = w
	}
	w.seqs[m.AggregateSeq]++
	return &turnWaiter{t: t, k: k, w: w, seq: m.AggregateSeq}
}

// turnWaiter is one delivery waiting on its aggregate.
type turnWaiter struct {
	t   *turns
	k   turnKey
	w   *turn
	seq int64
}

// next returns a channel closed when the aggregate next has an event
// applied, here or in another instance, or when the lowest of its waiting
// events here stops waiting; and whether this one is that lowest one.
// Only the lowest looks at the position between two wake-ups: the others
// cannot be applied before it, and a thousand events of one aggregate in
// flight would otherwise each ask the database several times a second.
func (tw *turnWaiter) next() (woken <-chan struct{}, lowest bool) {
	tw.t.mu.Lock()
	defer tw.t.mu.Unlock()
	for seq := range tw.w.seqs {
		if seq < tw.seq {
			return tw.w.applied, false
		}
	}
	return tw.w.applied, true
}

// moved returns the latest move of the position a wake told of.
func (tw *turnWaiter) moved() positionMove {
	tw.t.mu.Lock()
	defer tw.t.mu.Unlock()
	return tw.w.moved
}

// leave ends the wait.
func (tw *turnWaiter) leave() {
	tw.t.mu.Lock()
	defer tw.t.mu.Unlock()
	w := tw.w
	if w.seqs[tw.seq]--; w.seqs[tw.seq] == 0 {
		delete(w.seqs, tw.seq)
	}
	lowest := true
	for seq := range w.seqs {
		lowest = lowest && seq > tw.seq
	}
	switch {
	case len(w.seqs) == 0:
		if tw.t.waiting[tw.k] == w {
			delete(tw.t.waiting, tw.k)
		}
	case lowest:
		// The next lowest looks at the position from now on.
		close(w.applied)
		w.applied = make(chan struct{})
	}
}

// shed reports whether this delivery is to leave, nacked to come again
// later, to free its subscription's full window for the aggregate's
// earlier events: the aggregate has not moved for d, and it is in the
// higher half of the seqs waiting here. A round decides which seqs leave,
// and the next one comes d later at the earliest; a move ends it. The
// lowest waiting event never leaves this way.
func (tw *turnWaiter) shed(d time.Duration) bool {
	tw.t.mu.Lock()
	defer tw.t.mu.Unlock()
	w := tw.w
	now := time.Now()
	if now.Sub(w.movedAt) >= d && !now.Before(w.shedUntil.Add(d-gapShedRound)) {
		seqs := make([]int64, 0, len(w.seqs))
		for seq := range w.seqs {
			seqs = append(seqs, seq)
		}
		slices.Sort(seqs)
		w.shedFrom, w.shedUntil = 0, now.Add(gapShedRound)
		if half := len(seqs) / 2; half > 0 {
			w.shedFrom = seqs[len(seqs)-half]
		}
	}
	return w.shedFrom > 0 && tw.seq >= w.shedFrom && now.Before(w.shedUntil)
}

// gapShedRound is how long the seqs a shedding round chose have to see
// it: each waiting delivery looks at least every pauses.behind.
const gapShedRound = 3 * time.Second

// applied wakes the deliveries waiting on m's aggregate.
func (t *turns) applied(m events.Meta) {
	if t.progressed != nil {
		t.progressed(m.Consumer, m.Topic)
	}
	if m.AggregateSeq == 0 {
		return // not in an order: nothing waits on it
	}
	t.wake(turnKeyOf(m), positionMove{last: m.AggregateSeq})
}

// wake wakes the deliveries waiting on k's aggregate, whose position moved.
func (t *turns) wake(k turnKey, mv positionMove) {
	if mv.told && t.progressed != nil {
		t.progressed(k.consumer, k.topic) // moved by another instance: the topic is not stuck
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if w := t.waiting[k]; w != nil {
		if mv.last > w.moved.last || mv.last == w.moved.last && mv.told {
			w.moved = mv
		}
		if mv.last > 0 {
			w.movedAt, w.shedFrom = time.Now(), 0
		}
		close(w.applied)
		w.applied = make(chan struct{})
	}
}

// wakeAll wakes every waiting delivery, telling nothing of the positions.
func (t *turns) wakeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, w := range t.waiting {
		close(w.applied)
		w.applied = make(chan struct{})
	}
}
