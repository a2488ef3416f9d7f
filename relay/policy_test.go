package relay

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
	fast := failurePolicy{maxAttempts: 4, backoff: seconds}
	wal := failurePolicy{maxAttempts: 4, backoff: seconds, outageCap: 2500 * time.Millisecond}
	refused := failure{reason: "rejected", counts: true}
	outage := failure{reason: "broker away"}
	for _, c := range []struct {
		name   string
		policy failurePolicy
		tries  tries
		f      failure
		want   decision
	}{
		{"first counted failure: retry after the first backoff", fast, tries{}, refused,
			decision{reason: "rejected", attempts: 1, counted: true, wait: time.Second}},
		{"counted failure below the bound: backs off by the new count", fast, tries{attempts: 2}, refused,
			decision{reason: "rejected", attempts: 3, counted: true, wait: 3 * time.Second}},
		{"counted failure reaching the bound: dead letter", fast, tries{attempts: 3}, refused,
			decision{deadLetter: true, reason: "rejected (after 4 attempts)", class: metrics.ReasonMaxAttempts,
				attempts: 4, counted: true}},
		{"bound of one: the first failure is the last", failurePolicy{maxAttempts: 1, backoff: seconds}, tries{}, refused,
			decision{deadLetter: true, reason: "rejected (after 1 attempts)", class: metrics.ReasonMaxAttempts,
				attempts: 1, counted: true}},
		{"permanent: dead letter at once, counted", fast, tries{}, failure{reason: "no such topic", counts: true, permanent: true},
			decision{deadLetter: true, reason: "refused for good: no such topic", class: metrics.ReasonPermanent,
				attempts: 1, counted: true}},
		{"permanent but not counted (a caller's choice): dead letter, attempts kept", fast, tries{attempts: 2},
			failure{reason: "no such topic", permanent: true},
			decision{deadLetter: true, reason: "refused for good: no such topic", class: metrics.ReasonPermanent, attempts: 2}},
		{"malformed: dead letter with its reason as it is", fast, tries{attempts: 1},
			failure{reason: "topic is empty", counts: true, malformed: true},
			decision{deadLetter: true, reason: "topic is empty", class: metrics.ReasonMalformed, attempts: 1}},
		{"fast outage: not counted, backs off by the attempts", fast, tries{attempts: 3}, outage,
			decision{reason: "broker away", attempts: 3, wait: 3 * time.Second}},
		{"fast outage of a row never tried: the first backoff", fast, tries{}, outage,
			decision{reason: "broker away", wait: time.Second}},
		{"outage past a lowered bound: dead letter, attempts kept", fast, tries{attempts: 5}, outage,
			decision{deadLetter: true, reason: "broker away (after 5 attempts)", class: metrics.ReasonMaxAttempts, attempts: 5}},
		{"WAL outage: backs off by the outages", wal, tries{attempts: 3, outages: 1}, outage,
			decision{reason: "broker away", attempts: 3, outages: 2, wait: 2 * time.Second}},
		{"WAL outage: the wait is capped", wal, tries{outages: 7}, outage,
			decision{reason: "broker away", outages: 8, wait: 2500 * time.Millisecond}},
		{"WAL counted failure: backs off by the attempts, outages kept", wal, tries{attempts: 1, outages: 5}, refused,
			decision{reason: "rejected", attempts: 2, outages: 5, counted: true, wait: 2 * time.Second}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.policy.decide(c.tries, c.f); got != c.want {
				t.Errorf("decide(%+v, %+v)\n got %+v\nwant %+v", c.tries, c.f, got, c.want)
			}
		})
	}
}
