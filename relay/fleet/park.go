package fleet

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

// watchIdle parks r, ending its relay's run with errParked, once the
// relay has run and had nothing to publish for idleAfter; until ctx ends.
// A relay that is not running (starting, unready) is not parked: its
// state says more than parked would.
func (r *runner) watchIdle(ctx context.Context, idleAfter time.Duration, park context.CancelCauseFunc) {
	tick := time.NewTicker(max(idleAfter/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if r.park(idleAfter) {
			park(errParked)
			return
		}
	}
}

// park marks r parking when its relay runs and was idle for idleAfter.
func (r *runner) park(idleAfter time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st.State != StateRunning || !r.active.idleFor(idleAfter) {
		return false
	}
	r.parking = true
	return true
}

// waitParked shows r parked, its relay stopped (or not started yet) and
// its pool closed, and waits for the prober to find work; false when ctx
// ended first.
func (r *runner) waitParked(ctx context.Context, log watermill.LoggerAdapter) bool {
	r.mu.Lock()
	r.parking = true
	if r.st.State != StateStopping {
		r.st.State = StateParked
	}
	r.mu.Unlock()
	log.Debug("Tenant parked until its outbox has work", nil)
	select {
	case <-ctx.Done():
		return false
	case <-r.wake:
	}
	r.mu.Lock()
	r.parking = false
	if r.st.State == StateParked {
		r.st.State = StateWaiting // for its turn (takeTurn), at once when there is room
	}
	r.mu.Unlock()
	log.Debug("Tenant woken: its outbox has work", nil)
	return true
}

// wakeUp starts r's relay again if it is parked.
func (r *runner) wakeUp() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}
