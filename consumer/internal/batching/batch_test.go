package batching

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/consumer/internal/ordering"
	"github.com/entoutbox/entoutbox/events"
)

// event is aggregate agg's event seq, as the batcher sees it.
func event(agg string, seq int64) *Item {
	return &Item{Meta: events.Meta{EventID: uuid.New(), Consumer: "c", Topic: "t",
		AggregateType: "Order", AggregateID: agg, AggregateSeq: seq}}
}

func names(items []*Item) string {
	var out []string
	for _, it := range items {
		out = append(out, fmt.Sprintf("%s%d", it.Meta.AggregateID, it.Meta.AggregateSeq))
	}
	return strings.Join(out, " ")
}

// A batch takes, in arrival order, the events whose aggregates no running
// batch holds, a redelivered seq waiting for the next batch, and only when
// enough may go; what it looked at before is not looked at again, yet a
// batch's end lets its aggregates' events go at the next arrival.
func TestTakeGoesByAggregate(t *testing.T) {
	b := &Batcher{Tables: ordering.Tables{Positions: "positions"}, Size: 4}
	add := func(its ...*Item) { b.pending = append(b.pending, its...) }
	take := func(least int, want string) []*Item {
		t.Helper()
		got := b.takeLocked(least)
		if names(got) != want {
			t.Fatalf("take(least %d) = %q, want %q (pending now %q)", least, names(got), want, names(b.pending))
		}
		if got != nil {
			b.running++
		}
		return got
	}

	add(event("A", 1), event("A", 2), event("B", 1), event("A", 2), event("C", 1), event("E", 1))
	first := take(0, "A1 A2 B1 C1") // the size: E1 waits; the second A2 is the same event again
	if names(b.pending) != "A2 E1" {
		t.Fatalf("pending %q, want the redelivered A2, then E1", names(b.pending))
	}
	take(2, "") // A is in a running batch, E1 alone is fewer than 2
	add(event("D", 1))
	take(3, "")
	second := take(2, "E1 D1")
	add(event("B", 2))
	take(0, "") // A and B run
	b.endLocked(first)
	take(0, "A2 B2") // free again: looked at once more
	b.endLocked(second)
	if b.running != 1 || len(b.pending) != 0 {
		t.Fatalf("running %d, pending %q; want 1 batch running, none pending", b.running, names(b.pending))
	}
}
