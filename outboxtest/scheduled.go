package outboxtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/entoutbox/entoutbox/events"
)

// RequireScheduled finds the one event of type T among rows that is
// scheduled (events.DeliverAt, DeliverAfter) and not cancelled, checks that
// it is due at at, give or take within, and returns its payload. rows are
// what a transaction scheduled (tx.Outbox.ScheduledX(ctx)) or a query of
// the generated ScheduledEvent. It fails t, saying what was scheduled
// instead, when there is none, more than one, or it is due at another
// time:
//
//	tx.Outbox.EmitPaymentReminder(ctx, o.ID, ent.PaymentReminder{OrderID: o.ID}, events.DeliverAfter(24*time.Hour))
//	r := outboxtest.RequireScheduled[ent.PaymentReminder](t, tx.Outbox.ScheduledX(ctx), time.Now().Add(24*time.Hour), time.Minute)
//
// The database's clock decides when an event is due (DeliverAfter adds to
// it), so within covers the difference between it and the test's clock.
func RequireScheduled[T events.Payload, R Recorder](t testing.TB, rows []R, at time.Time, within time.Duration) T {
	t.Helper()
	var zero T
	name, version := zero.OutboxEvent()
	var pending, other []events.Record
	for _, r := range rows {
		rec := r.OutboxRecord()
		if rec.Name == name && !rec.DeliverAt.IsZero() && rec.CancelledAt == nil {
			pending = append(pending, rec)
		} else {
			other = append(other, rec)
		}
	}
	switch {
	case len(pending) == 0:
		t.Fatalf("outboxtest: no %q event is scheduled; %s", name, described(other))
	case len(pending) > 1:
		t.Fatalf("outboxtest: %q is scheduled %d times, want once: %s", name, len(pending), described(pending))
	}
	rec := pending[0]
	if off := rec.DeliverAt.Sub(at); off > within || off < -within {
		t.Fatalf("outboxtest: %q event %s is due at %s, want %s give or take %s (%s)", name, rec.EventID,
			stamp(rec.DeliverAt), stamp(at), within, offBy(off))
	}
	return decode[T](t, rec, name, version)
}

// RequireNotScheduled fails t when rows hold an event of type T scheduled
// for later and not cancelled.
func RequireNotScheduled[T events.Payload, R Recorder](t testing.TB, rows []R) {
	t.Helper()
	var zero T
	name, _ := zero.OutboxEvent()
	for _, r := range rows {
		if rec := r.OutboxRecord(); rec.Name == name && !rec.DeliverAt.IsZero() && rec.CancelledAt == nil {
			t.Fatalf("outboxtest: %q is scheduled (event %s, due at %s), want none", name, rec.EventID, stamp(rec.DeliverAt))
		}
	}
}

// described lists recs for a failure message: each event and when it is
// due, cancelled, or sent at once.
func described(recs []events.Record) string {
	if len(recs) == 0 {
		return "no event is scheduled"
	}
	ss := make([]string, len(recs))
	for i, r := range recs {
		what := fmt.Sprintf("%q (event %s, aggregate %s)", r.Name, r.EventID, r.AggregateID)
		switch {
		case r.DeliverAt.IsZero():
			ss[i] = what + " sent at once, not scheduled"
		case r.CancelledAt != nil:
			ss[i] = fmt.Sprintf("%s due at %s, cancelled at %s", what, stamp(r.DeliverAt), stamp(*r.CancelledAt))
		default:
			ss[i] = fmt.Sprintf("%s due at %s", what, stamp(r.DeliverAt))
		}
	}
	return "the rows hold " + strings.Join(ss, "; ")
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00") }

func offBy(d time.Duration) string {
	if d < 0 {
		return (-d).String() + " early"
	}
	return d.String() + " late"
}
