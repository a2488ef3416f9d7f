package fleet

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// DefaultTurn is how long a tenant's relay runs, while other tenants wait
// for room in the connection budget, before it makes way for them.
const DefaultTurn = 10 * time.Second

// RelaysAtOnce is how many tenants' relays run at once within budget
// connections: each needs the floor of its pool (MinConnectionsPolling,
// or MinConnectionsListening when listening). The others wait their turn
// (StateWaiting).
func RelaysAtOnce(budget int, listening bool) int {
	return max(1, budget/floor(listening))
}

func floor(listening bool) int {
	if listening {
		return MinConnectionsListening
	}
	return MinConnectionsPolling
}

// errYield ends a relay's run when its turn is over and another tenant
// waits for room.
var errYield = errors.New("turn over: another tenant waits for room in the connection budget")

// turns hands out the room for relays running at once, first come first
// served: a tenant woken with work, or whose turn ended, waits behind
// those that waited before it.
//
// A tenant's state changes with its room, under mu (the callbacks of
// tryAcquire, acquire and release), and Fleet.Status reads the states
// under mu (consistent): so no status ever shows more relays running
// than the limit, even for an instant.
type turns struct {
	mu    sync.Mutex
	limit int
	held  int
	queue []*waiter // in order of arrival
}

type waiter struct {
	granted chan struct{} // closed when granted
	onGrant func()
}

func newTurns(limit int) *turns { return &turns{limit: limit} }

// tryAcquire takes room when there is some and nobody waits for it, and
// then calls onGrant while nobody else takes or gives room.
func (t *turns) tryAcquire(onGrant func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held < t.limit && len(t.queue) == 0 {
		t.held++
		onGrant()
		return true
	}
	return false
}

// acquire waits for room and takes it, calling onGrant as tryAcquire
// does; false when ctx ended first.
func (t *turns) acquire(ctx context.Context, onGrant func()) bool {
	if t.tryAcquire(onGrant) {
		return true
	}
	t.mu.Lock()
	w := &waiter{granted: make(chan struct{}), onGrant: onGrant}
	t.queue = append(t.queue, w)
	t.grant() // room may have been given back since tryAcquire
	t.mu.Unlock()
	select {
	case <-w.granted:
		return true
	case <-ctx.Done():
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if i := slices.Index(t.queue, w); i >= 0 {
		t.queue = slices.Delete(t.queue, i, i+1)
	} else { // granted as ctx ended: give the room on
		t.held--
		t.grant()
	}
	return false
}

// release gives back room taken by acquire, after calling before while
// nobody else takes or gives room.
func (t *turns) release(before func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	before()
	t.held--
	t.grant()
}

// consistent calls read while nobody takes or gives room.
func (t *turns) consistent(read func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	read()
}

// setLimit changes how many relays run at once; relays over a lowered
// limit finish their turn (contended tells them).
func (t *turns) setLimit(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.limit = n
	t.grant()
}

func (t *turns) grant() {
	for t.held < t.limit && len(t.queue) > 0 {
		w := t.queue[0]
		t.queue = t.queue[1:]
		t.held++
		w.onGrant()
		close(w.granted)
	}
}

// contended tells whether a tenant waits for room.
func (t *turns) contended() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.queue) > 0 || t.held > t.limit
}

// watchTurn ends r's relay's run with errYield once it ran for turn while
// another tenant waits for room, until ctx ends.
func (f *Fleet) watchTurn(ctx context.Context, began time.Time, yield context.CancelCauseFunc) {
	tick := time.NewTicker(max(f.cfg.Turn/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if time.Since(began) >= f.cfg.Turn && f.turns.contended() {
			yield(errYield)
			return
		}
	}
}
