package fastpath

import (
	"slices"
	"time"

	"github.com/entoutbox/entoutbox/relay/internal/engine"
)

// queues keeps the books of what a subscription holds, from the claim to
// the record of its delivery: the claimed rows of each aggregate in id
// order, at most one of them in flight at a time, the acks waiting to be
// recorded, and the aggregates blocked until a retry. It counts the bytes
// all of that holds (see MaxBytesInFlight). It does no I/O and has no
// clock of its own: the run loop decides, queues remembers.
type queues struct {
	aggs      map[engine.Aggregate]*aggState
	ready     []engine.Aggregate // aggregates whose next row can be sent (stale entries are skipped)
	inflight  map[int64]*engine.Row
	unflushed map[int64]int // acked, not recorded yet: id -> partition
	acks      []ack         // acked, not handed to a recording yet
	queued    int           // rows claimed and not sent yet
	blocked   map[engine.Aggregate]blocked

	// bytes is the size of the rows held: queued, in flight, acked and not
	// recorded. freed counts the times it went down.
	bytes   int64
	freed   uint64
	onBytes func(delta int64) // tells the Subscriber's total; nil for none
}

// aggState is what a subscription holds of one aggregate.
type aggState struct {
	rows      []*engine.Row // claimed, not sent yet, in id order
	inflight  bool
	partition int
}

// blocked is an aggregate waiting for the retry of its oldest row.
type blocked struct {
	until     time.Time
	partition int
}

// ack is a delivered row, to be recorded as such.
type ack struct {
	id        int64
	partition int
	size      int64
}

func newQueues(onBytes func(delta int64)) *queues {
	return &queues{aggs: map[engine.Aggregate]*aggState{}, inflight: map[int64]*engine.Row{}, unflushed: map[int64]int{},
		blocked: map[engine.Aggregate]blocked{}, onBytes: onBytes}
}

// held is the number of rows held. Rows acked but not recorded yet count
// too: what a relay that dies or stalls may have published without
// recording it stays within BatchSize.
func (q *queues) held() int { return q.queued + len(q.inflight) + len(q.unflushed) }

// push queues r behind the rows of its aggregate already held.
func (q *queues) push(r *engine.Row) {
	a := r.Aggregate()
	st := q.aggs[a]
	if st == nil {
		st = &aggState{partition: r.Partition}
		q.aggs[a] = st
	}
	if len(st.rows) == 0 && !st.inflight {
		q.ready = append(q.ready, a)
	}
	st.rows = append(st.rows, r)
	q.queued++
	q.hold(r.Size)
}

// head is the row to send next, nil if none.
func (q *queues) head() *engine.Row {
	for len(q.ready) > 0 {
		st := q.aggs[q.ready[0]]
		if st != nil && len(st.rows) > 0 && !st.inflight {
			return st.rows[0]
		}
		q.ready = q.ready[1:] // forgotten or sent meanwhile
	}
	return nil
}

// send marks the head in flight: its aggregate sends nothing more until
// it is settled. Call it only right after head returned a row.
func (q *queues) send() *engine.Row {
	a := q.ready[0]
	q.ready = q.ready[1:]
	st := q.aggs[a]
	r := st.rows[0]
	st.rows = st.rows[1:]
	st.inflight = true
	q.queued--
	q.inflight[r.ID] = r
	return r
}

// settle takes r out of flight. An acked row waits to be recorded; a
// nacked one is let go, to be read again for its retry. Either way the
// aggregate waits until goOn or block says what comes next.
func (q *queues) settle(r *engine.Row, acked bool) {
	delete(q.inflight, r.ID)
	q.aggs[r.Aggregate()].inflight = false
	if acked {
		q.unflushed[r.ID] = r.Partition
		q.acks = append(q.acks, ack{r.ID, r.Partition, r.Size})
		return
	}
	q.free(r.Size)
}

// goOn lets the settled aggregate a send its next row.
func (q *queues) goOn(a engine.Aggregate) {
	st := q.aggs[a]
	if st == nil {
		return
	}
	if len(st.rows) > 0 {
		q.ready = append(q.ready, a)
	} else if !st.inflight {
		delete(q.aggs, a)
	}
}

// forget drops the unsent rows of a: they are not delivered, so a later
// claim takes them again.
func (q *queues) forget(a engine.Aggregate) {
	st := q.aggs[a]
	if st == nil {
		return
	}
	q.queued -= len(st.rows)
	for _, r := range st.rows {
		q.free(r.Size)
	}
	st.rows = nil
	if !st.inflight {
		delete(q.aggs, a)
	}
}

// drop forgets everything unsent of partition p, blocks included (the
// next owner reads the retry time off the row).
func (q *queues) drop(p int) {
	for a, st := range q.aggs {
		if st.partition == p {
			q.forget(a)
		}
	}
	for a, b := range q.blocked {
		if b.partition == p {
			delete(q.blocked, a)
		}
	}
}

// block holds back aggregate a until the retry of its oldest row, which
// it forgets with the rest of its unsent rows.
func (q *queues) block(a engine.Aggregate, partition int, until time.Time) {
	q.forget(a)
	q.blocked[a] = blocked{until: until, partition: partition}
}

// unblock tells whether a claimed row of a may be queued: a is not
// blocked, or the claim reads from the oldest row (fromStart) and began
// after a's block ended, which is then lifted. Only such a claim is sure
// to return a's oldest row first.
func (q *queues) unblock(a engine.Aggregate, fromStart bool, started time.Time) bool {
	b, ok := q.blocked[a]
	if !ok {
		return true
	}
	if !fromStart || !started.After(b.until) {
		return false
	}
	delete(q.blocked, a)
	return true
}

// stillBlocked is the aggregates whose retry is not due at now.
func (q *queues) stillBlocked(now time.Time) []engine.Aggregate {
	var out []engine.Aggregate
	for a, b := range q.blocked {
		if b.until.After(now) {
			out = append(out, a)
		}
	}
	return out
}

// nextRetry is when the earliest block that has not ended at now ends,
// zero if none.
func (q *queues) nextRetry(now time.Time) time.Time {
	var at time.Time
	for _, b := range q.blocked {
		if b.until.After(now) && (at.IsZero() || b.until.Before(at)) {
			at = b.until
		}
	}
	return at
}

// drained tells whether nothing of partition p is in flight or waits to be
// recorded, so that the next owner starts where this one stopped.
func (q *queues) drained(p int) bool {
	for _, r := range q.inflight {
		if r.Partition == p {
			return false
		}
	}
	for _, o := range q.unflushed {
		if o == p {
			return false
		}
	}
	for _, k := range q.acks {
		if k.partition == p {
			return false
		}
	}
	return true
}

// takeAcks hands the acks over to be recorded; they stay held until
// recorded says so.
func (q *queues) takeAcks() []ack {
	acks := q.acks
	q.acks = nil
	return acks
}

// recorded takes the outcome of recording acks: held no more either way
// (a row whose record failed is delivered again).
func (q *queues) recorded(acks []ack) {
	for _, k := range acks {
		if _, ok := q.unflushed[k.id]; ok {
			delete(q.unflushed, k.id)
			q.free(k.size)
		}
	}
}

// heldIDs is the ids of every row held, for a claim to leave out.
func (q *queues) heldIDs() []int64 {
	ids := make([]int64, 0, q.held())
	for _, st := range q.aggs {
		for _, r := range st.rows {
			ids = append(ids, r.ID)
		}
	}
	for id := range q.inflight {
		ids = append(ids, id)
	}
	for id := range q.unflushed {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (q *queues) hold(n int64) {
	q.bytes += n
	if q.onBytes != nil {
		q.onBytes(n)
	}
}

func (q *queues) free(n int64) {
	q.bytes -= n
	q.freed++
	if q.onBytes != nil {
		q.onBytes(-n)
	}
}
