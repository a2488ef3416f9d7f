package listen

import (
	"sync"
	"time"
)

// FirstWait is the wait before the first reconnect after a loss.
const FirstWait = firstWait

// Waits records the waits l's Run chooses before reconnecting; set before
// Run. Tests hold the choice, not the clock: a busy machine makes a
// reconnect slow, not its wait long.
type Waits struct {
	mu    sync.Mutex
	waits []time.Duration
}

func RecordWaits(l *Listener) *Waits {
	w := &Waits{}
	l.onWait = func(d time.Duration) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.waits = append(w.waits, d)
	}
	return w
}

// Len is how many waits were chosen so far.
func (w *Waits) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.waits)
}

// At is the i-th wait chosen.
func (w *Waits) At(i int) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waits[i]
}
