package listen

import "sync"

// Wakeups tells a reader when to look again. Its signals coalesce: one
// is pending at most, however many notifications came. A reader keeps
// polling on its own timer as well: a database without notifications
// signals nothing.
type Wakeups interface {
	// C is signalled when channel was notified; nil (never ready) for a
	// channel not listened on.
	C(channel string) <-chan struct{}
	// Missed is signalled when notifications may have been missed: a
	// LISTEN was just put in place, or its connection was lost. Look once.
	Missed() <-chan struct{}
	// Close stops the signals.
	Close()
}

// Polling returns Wakeups that never signal: the reader polls alone.
func Polling() Wakeups { return polling{} }

type polling struct{}

func (polling) C(string) <-chan struct{} { return nil }
func (polling) Missed() <-chan struct{}  { return nil }
func (polling) Close()                   {}

// waiter is a reader's Wakeups on a Listener.
type waiter struct {
	l       *Listener
	notes   map[string]chan struct{}
	missed  chan struct{}
	closing sync.Once
}

func (w *waiter) C(channel string) <-chan struct{} {
	if c, ok := w.notes[channel]; ok {
		return c
	}
	return nil
}

func (w *waiter) Missed() <-chan struct{} { return w.missed }

func (w *waiter) Close() {
	w.closing.Do(func() {
		w.l.mu.Lock()
		delete(w.l.waiters, w)
		w.l.mu.Unlock()
	})
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
