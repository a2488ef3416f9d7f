package relay

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

// failure is one failed delivery of a row, as its read path saw it.
type failure struct {
	// reason is what failed, as the broker or the consumer said it.
	reason string
	// counts tells the row's own failure (the broker answered, or a
	// consumer nacked): it counts towards MaxAttempts. A failure in an
	// outage does not.
	counts bool
	// permanent tells no retry can cure it: to the dead letters at once.
	permanent bool
	// malformed tells no broker can take the row as it is (a row written
	// by hand): to the dead letters at once, with reason as it is.
	malformed bool
}

// tries is what a row went through before the failure being decided.
type tries struct {
	attempts int // failures that counted
	outages  int // failures in an outage (kept by the WAL path only)
}

// failurePolicy is a read path's settings of the decision.
type failurePolicy struct {
	maxAttempts int
	// backoff is the wait after the given failed attempt (1-based).
	backoff func(attempt int) time.Duration
	// outageCap, above zero, makes a retry after an outage back off by the
	// row's outages, up to outageCap: the WAL path holds the row in
	// memory while it waits and wants it out soon after the broker is
	// back. At zero it backs off by the row's attempts, as the fast path
	// does: it writes the retry in the row and reads the row again, with
	// no count of outages.
	outageCap time.Duration
}

// decision is what becomes of the row.
type decision struct {
	// deadLetter: move the row to the dead letters with reason and class.
	// Otherwise try it again after wait.
	deadLetter bool
	reason     string // the dead letter's reason; the failure's own for a retry
	class      string // the dead letter's metrics class (metrics.Reason*)
	// attempts and outages are the row's counts after this failure, to
	// record on the row or its dead letter.
	attempts, outages int
	counted           bool // the failure counted as an attempt
	wait              time.Duration
}

// decide applies the policy to failure f of a row that went through t.
func (p failurePolicy) decide(t tries, f failure) decision {
	d := decision{reason: f.reason, attempts: t.attempts, outages: t.outages, counted: f.counts && !f.malformed}
	if d.counted {
		d.attempts++
	}
	switch {
	case f.malformed:
		return malformed(f.reason, t.attempts)
	case f.permanent:
		d.deadLetter, d.class, d.reason = true, metrics.ReasonPermanent, "refused for good: "+f.reason
	case d.attempts >= p.maxAttempts:
		// An outage reaches it only when the bound was lowered below the
		// attempts the row already had.
		d.deadLetter, d.class = true, metrics.ReasonMaxAttempts
		d.reason = fmt.Sprintf("%s (after %d attempts)", f.reason, d.attempts)
	case d.counted:
		d.wait = p.backoff(d.attempts)
	case p.outageCap > 0:
		d.outages++
		d.wait = min(p.backoff(d.outages), p.outageCap)
	default:
		d.wait = p.backoff(max(d.attempts, 1))
	}
	return d
}

// malformed is the decision for a row no broker can take as it is, on any
// path (the compatible one has no other policy): to the dead letters at
// once, with reason as it is and the attempts it had.
func malformed(reason string, attempts int) decision {
	return decision{deadLetter: true, reason: reason, class: metrics.ReasonMalformed, attempts: attempts}
}

// failurePolicy is the fast path's: its outages back off by the row's
// attempts.
func (c SubscriberConfig) failurePolicy() failurePolicy {
	return failurePolicy{maxAttempts: c.MaxAttempts, backoff: c.backoff}
}

// walOutageCap bounds the WAL path's wait after a failure in an outage.
const walOutageCap = time.Second

// walFailurePolicy is the WAL path's: its outages back off by their own
// count, up to walOutageCap.
func (c Config) walFailurePolicy() failurePolicy {
	return failurePolicy{maxAttempts: c.MaxAttempts, backoff: c.backoff, outageCap: walOutageCap}
}
