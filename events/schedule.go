package events

import (
	"errors"
	"fmt"
	"time"
)

// DefaultMaxDelay is how far ahead an event may be scheduled (DeliverAt,
// DeliverAfter) unless its declaration says otherwise with a MaxDelay
// method: a little over a year. Anything later is almost always a bug (a
// zero time, seconds taken for milliseconds) and is refused at Emit.
const DefaultMaxDelay = 366 * 24 * time.Hour

// MaxDelay is how far ahead the event may be scheduled: DefaultMaxDelay.
// A declaration overrides it to allow more or less; zero or a negative
// value means the event is never scheduled (Emit refuses DeliverAt and
// DeliverAfter for it). The generated AsyncAPI document states it.
func (Schema) MaxDelay() time.Duration { return DefaultMaxDelay }

// DeliverAt makes Emit hold the event back until t, by the database's
// clock: the relay sends it once the database's time has reached t, never
// before, whatever the clocks of the emitting or relaying servers say. A t
// in the past (by the database's clock) sends it at once, as due.
//
// The event is written, committed or rolled back with the transaction like
// any other, but into the scheduled events (schema.ScheduledEvent) until it
// is due; then it takes its place in its aggregate's order, after the
// events of the aggregate emitted before it is due, so it holds back none
// of them while it waits. Events of an aggregate due at the same time keep
// their commit order. Cancel stops it while it waits.
//
// A zero t, or a t further ahead than the event's MaxDelay, is refused
// with an *ValidationError naming the event; nothing is written.
func DeliverAt(t time.Time) EmitOption {
	return func(c *EmitConfig) {
		c.Scheduled, c.DeliverAt, c.DeliverAfter, c.atGiven = true, t, 0, true
	}
}

// DeliverAfter is DeliverAt(the database's time at the Emit + d): the
// database's clock is read when the event is written, so that the time of
// the emitting server does not matter. Zero sends it at once, as due; a
// negative d, or one beyond the event's MaxDelay, is refused with an
// *ValidationError naming the event.
func DeliverAfter(d time.Duration) EmitOption {
	return func(c *EmitConfig) {
		c.Scheduled, c.DeliverAt, c.DeliverAfter, c.atGiven = true, time.Time{}, d, false
	}
}

// CheckSchedule reports what is wrong with the schedule cfg asks for, for
// an event that may be scheduled up to maxDelay ahead; now is the emitting
// server's time, good enough to find a time years away (the database's
// clock decides when the event is due). It returns nil when cfg schedules
// nothing.
func CheckSchedule(cfg EmitConfig, maxDelay time.Duration, now time.Time) error {
	if !cfg.Scheduled {
		return nil
	}
	if maxDelay <= 0 {
		return errors.New("events: this event is never scheduled (its declaration's MaxDelay is not positive); emit it without DeliverAt or DeliverAfter")
	}
	if !cfg.atGiven && cfg.DeliverAt.IsZero() {
		if cfg.DeliverAfter < 0 {
			return fmt.Errorf("events: DeliverAfter(%s) is negative; use DeliverAfter(0) to deliver at once", cfg.DeliverAfter)
		}
		if cfg.DeliverAfter > maxDelay {
			return fmt.Errorf("events: DeliverAfter(%s) is further ahead than the event's MaxDelay (%s)", cfg.DeliverAfter, FormatDelay(maxDelay))
		}
		return nil
	}
	if cfg.DeliverAt.Year() < 1970 {
		return fmt.Errorf("events: DeliverAt(%s) is not a time an event is due (a zero or unset time?)", cfg.DeliverAt.Format(time.RFC3339))
	}
	if ahead := cfg.DeliverAt.Sub(now); ahead > maxDelay {
		return fmt.Errorf("events: DeliverAt(%s) is %s ahead, further than the event's MaxDelay (%s)",
			cfg.DeliverAt.Format(time.RFC3339), FormatDelay(ahead.Round(time.Second)), FormatDelay(maxDelay))
	}
	return nil
}

// FormatDelay writes d for a reader: whole days as "366 days", others as
// time.Duration does.
func FormatDelay(d time.Duration) string {
	const day = 24 * time.Hour
	if d >= day && d%day == 0 {
		return fmt.Sprintf("%d days", d/day)
	}
	return d.String()
}

// CancelResult is what Cancel found.
type CancelResult int

const (
	// Cancelled: the event was waiting for its time; it is never sent. It
	// stays among the scheduled events, marked cancelled, until retention
	// removes it.
	Cancelled CancelResult = iota + 1
	// AlreadyCancelled: an earlier Cancel stopped it.
	AlreadyCancelled
	// TooLate: the event is in the outbox, due (or never scheduled): it is
	// sent, or being sent, and cannot be called back.
	TooLate
)

func (r CancelResult) String() string {
	switch r {
	case Cancelled:
		return "cancelled"
	case AlreadyCancelled:
		return "already cancelled"
	case TooLate:
		return "too late: already due"
	}
	return fmt.Sprintf("CancelResult(%d)", int(r))
}

// ErrEventNotFound is returned by Cancel for an event id that is neither
// waiting among the scheduled events nor in the outbox: never emitted, not
// committed yet by another transaction, or removed by retention.
var ErrEventNotFound = errors.New("events: no event with this id among the scheduled events or in the outbox")
