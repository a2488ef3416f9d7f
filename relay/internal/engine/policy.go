package engine

import (
	"fmt"
	"time"

	"github.com/entoutbox/entoutbox/metrics"
)

// What becomes of a row whose delivery failed, decided in one place for
// every read path: tried again after a wait, or moved to the dead letters
// with a reason, a count of attempts and a metric class. The decision is a
// pure function of what the row went through and what failed; the read
// path carries it out (records the retry or moves the row).

// Failure is one failed delivery of a row, as its read path saw it.
type Failure struct {
	// Reason is what failed, as the broker or the consumer said it.
	Reason string
	// Counts tells the row's own failure (the broker answered, or a
	// consumer nacked): it counts towards MaxAttempts. A failure in an
	// outage does not.
	Counts bool
	// Permanent tells no retry can cure it: to the dead letters at once.
	Permanent bool
	// Malformed tells no broker can take the row as it is (a row written
	// by hand): to the dead letters at once, with reason as it is.
	Malformed bool
}

// Tries is what a row went through before the failure being decided.
type Tries struct {
	Attempts int // failures that counted
	Outages  int // failures in an outage (kept by the WAL path only)
}

// Policy is a read path's settings of the decision.
type Policy struct {
	MaxAttempts int
	// Backoff is the wait after the given failed attempt (1-based).
	Backoff func(attempt int) time.Duration
	// OutageCap, above zero, makes a retry after an outage back off by the
	// row's outages, up to OutageCap: the WAL path holds the row in
	// memory while it waits and wants it out soon after the broker is
	// back. At zero it backs off by the row's attempts, as the fast path
	// does: it writes the retry in the row and reads the row again, with
	// no count of outages.
	OutageCap time.Duration
}

// Decision is what becomes of the row.
type Decision struct {
	// DeadLetter: move the row to the dead letters with reason and class.
	// Otherwise try it again after wait.
	DeadLetter bool
	Reason     string // the dead letter's reason; the failure's own for a retry
	Class      string // the dead letter's metrics class (metrics.Reason*)
	// Attempts and Outages are the row's counts after this failure, to
	// record on the row or its dead letter.
	Attempts, Outages int
	Counted           bool // the failure counted as an attempt
	Wait              time.Duration
}

// Decide applies the policy to failure f of a row that went through t.
func (p Policy) Decide(t Tries, f Failure) Decision {
	d := Decision{Reason: f.Reason, Attempts: t.Attempts, Outages: t.Outages, Counted: f.Counts && !f.Malformed}
	if d.Counted {
		d.Attempts++
	}
	switch {
	case f.Malformed:
		return Malformed(f.Reason, t.Attempts)
	case f.Permanent:
		d.DeadLetter, d.Class, d.Reason = true, metrics.ReasonPermanent, "refused for good: "+f.Reason
	case d.Attempts >= p.MaxAttempts:
		// An outage reaches it only when the bound was lowered below the
		// attempts the row already had.
		d.DeadLetter, d.Class = true, metrics.ReasonMaxAttempts
		d.Reason = fmt.Sprintf("%s (after %d attempts)", f.Reason, d.Attempts)
	case d.Counted:
		d.Wait = p.Backoff(d.Attempts)
	case p.OutageCap > 0:
		d.Outages++
		d.Wait = min(p.Backoff(d.Outages), p.OutageCap)
	default:
		d.Wait = p.Backoff(max(d.Attempts, 1))
	}
	return d
}

// Malformed is the decision for a row no broker can take as it is, on any
// path (the compatible one has no other policy): to the dead letters at
// once, with reason as it is and the attempts it had.
func Malformed(reason string, attempts int) Decision {
	return Decision{DeadLetter: true, Reason: reason, Class: metrics.ReasonMalformed, Attempts: attempts}
}
