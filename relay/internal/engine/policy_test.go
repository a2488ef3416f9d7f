package engine

import (
	"testing"
	"time"

	"github.com/entoutbox/entoutbox/metrics"
)

// Every branch of the failure policy, for both read paths' settings. The
// backoff is n seconds after attempt n, so that a wait tells which count
// it was computed from.
func TestFailurePolicy(t *testing.T) {
	seconds := func(n int) time.Duration { return time.Duration(n) * time.Second }
	fast := Policy{MaxAttempts: 4, Backoff: seconds}
	wal := Policy{MaxAttempts: 4, Backoff: seconds, OutageCap: 2500 * time.Millisecond}
	refused := Failure{Reason: "rejected", Counts: true}
	outage := Failure{Reason: "broker away"}
	for _, c := range []struct {
		name   string
		policy Policy
		tries  Tries
		f      Failure
		want   Decision
	}{
		{"first counted failure: retry after the first backoff", fast, Tries{}, refused,
			Decision{Reason: "rejected", Attempts: 1, Counted: true, Wait: time.Second}},
		{"counted failure below the bound: backs off by the new count", fast, Tries{Attempts: 2}, refused,
			Decision{Reason: "rejected", Attempts: 3, Counted: true, Wait: 3 * time.Second}},
		{"counted failure reaching the bound: dead letter", fast, Tries{Attempts: 3}, refused,
			Decision{DeadLetter: true, Reason: "rejected (after 4 attempts)", Class: metrics.ReasonMaxAttempts,
				Attempts: 4, Counted: true}},
		{"bound of one: the first failure is the last", Policy{MaxAttempts: 1, Backoff: seconds}, Tries{}, refused,
			Decision{DeadLetter: true, Reason: "rejected (after 1 attempts)", Class: metrics.ReasonMaxAttempts,
				Attempts: 1, Counted: true}},
		{"permanent: dead letter at once, counted", fast, Tries{}, Failure{Reason: "no such topic", Counts: true, Permanent: true},
			Decision{DeadLetter: true, Reason: "refused for good: no such topic", Class: metrics.ReasonPermanent,
				Attempts: 1, Counted: true}},
		{"permanent but not counted (a caller's choice): dead letter, attempts kept", fast, Tries{Attempts: 2},
			Failure{Reason: "no such topic", Permanent: true},
			Decision{DeadLetter: true, Reason: "refused for good: no such topic", Class: metrics.ReasonPermanent, Attempts: 2}},
		{"malformed: dead letter with its reason as it is", fast, Tries{Attempts: 1},
			Failure{Reason: "topic is empty", Counts: true, Malformed: true},
			Decision{DeadLetter: true, Reason: "topic is empty", Class: metrics.ReasonMalformed, Attempts: 1}},
		{"fast outage: not counted, backs off by the attempts", fast, Tries{Attempts: 3}, outage,
			Decision{Reason: "broker away", Attempts: 3, Wait: 3 * time.Second}},
		{"fast outage of a row never tried: the first backoff", fast, Tries{}, outage,
			Decision{Reason: "broker away", Wait: time.Second}},
		{"outage past a lowered bound: dead letter, attempts kept", fast, Tries{Attempts: 5}, outage,
			Decision{DeadLetter: true, Reason: "broker away (after 5 attempts)", Class: metrics.ReasonMaxAttempts, Attempts: 5}},
		{"WAL outage: backs off by the outages", wal, Tries{Attempts: 3, Outages: 1}, outage,
			Decision{Reason: "broker away", Attempts: 3, Outages: 2, Wait: 2 * time.Second}},
		{"WAL outage: the wait is capped", wal, Tries{Outages: 7}, outage,
			Decision{Reason: "broker away", Outages: 8, Wait: 2500 * time.Millisecond}},
		{"WAL counted failure: backs off by the attempts, outages kept", wal, Tries{Attempts: 1, Outages: 5}, refused,
			Decision{Reason: "rejected", Attempts: 2, Outages: 5, Counted: true, Wait: 2 * time.Second}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.policy.Decide(c.tries, c.f); got != c.want {
				t.Errorf("decide(%+v, %+v)\n got %+v\nwant %+v", c.tries, c.f, got, c.want)
			}
		})
	}
}
