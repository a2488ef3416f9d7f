package fastpath

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/relay/internal/engine"
)

// These run without PostgreSQL: queues and partitionSet are the fast
// path's books, kept apart from its I/O so that their rules can be tested
// alone. The tests with a database check the same rules end to end.

func testRow(id int64, agg string, partition int) *engine.Row {
	return &engine.Row{ID: id, AggregateType: "order", AggregateID: agg, Partition: partition, Size: 10}
}

// sendAll sends every row that may be sent now, as the run loop does, and
// returns their ids.
func sendAll(q *queues) []int64 {
	var ids []int64
	for q.head() != nil {
		ids = append(ids, q.send().ID)
	}
	return ids
}

func TestQueuesSendOneRowPerAggregateAtATimeInOrder(t *testing.T) {
	q := newQueues(nil)
	for _, r := range []*engine.Row{testRow(1, "a", 0), testRow(2, "b", 0), testRow(3, "a", 0), testRow(4, "a", 0)} {
		q.push(r)
	}
	require.Equal(t, []int64{1, 2}, sendAll(q), "one row of each aggregate goes out, the oldest")
	require.Nil(t, q.head(), "a's next row waits for the one in flight")

	q.settle(q.inflight[1], true)
	q.goOn(engine.Aggregate{Type: "order", ID: "a"})
	require.Equal(t, []int64{3}, sendAll(q))
	q.settle(q.inflight[2], true)
	q.goOn(engine.Aggregate{Type: "order", ID: "b"})
	require.Empty(t, sendAll(q), "b has nothing more")
	q.settle(q.inflight[3], true)
	q.goOn(engine.Aggregate{Type: "order", ID: "a"})
	require.Equal(t, []int64{4}, sendAll(q))
	require.Equal(t, 4, q.held(), "acked rows count until recorded")
	acks := q.takeAcks()
	require.Len(t, acks, 3)
	q.recorded(acks)
	require.Equal(t, 1, q.held())
	require.Equal(t, int64(10), q.bytes)
}

func TestQueuesNackedAggregateWaitsForItsRetry(t *testing.T) {
	q := newQueues(nil)
	a := engine.Aggregate{Type: "order", ID: "a"}
	q.push(testRow(1, "a", 3))
	q.push(testRow(2, "a", 3))
	require.Equal(t, []int64{1}, sendAll(q))
	q.settle(q.inflight[1], false)
	until := time.Unix(100, 0)
	q.block(a, 3, until)
	require.Nil(t, q.head(), "row 2 must not overtake row 1, which waits for its retry")
	require.Zero(t, q.held(), "the blocked aggregate's rows are let go, to be claimed again")
	require.Zero(t, q.bytes)

	require.Equal(t, []engine.Aggregate{a}, q.stillBlocked(until.Add(-time.Second)))
	require.Empty(t, q.stillBlocked(until))
	require.Equal(t, until, q.nextRetry(until.Add(-time.Second)))
	require.True(t, q.nextRetry(until).IsZero())

	require.False(t, q.unblock(a, false, until.Add(time.Second)), "only a claim from the oldest row may unblock")
	require.False(t, q.unblock(a, true, until), "a claim begun before the block ended may miss the row")
	require.True(t, q.unblock(a, true, until.Add(time.Millisecond)))
	require.True(t, q.unblock(a, false, time.Time{}), "no longer blocked")
}

func TestQueuesDropForgetsAPartitionButNotWhatIsInFlight(t *testing.T) {
	var total int64
	q := newQueues(func(d int64) { total += d })
	q.push(testRow(1, "a", 1))
	q.push(testRow(2, "a", 1))
	q.push(testRow(3, "b", 2))
	q.block(engine.Aggregate{Type: "order", ID: "c"}, 1, time.Unix(100, 0))
	require.Equal(t, []int64{1, 3}, sendAll(q))
	require.Equal(t, int64(30), total)
	require.False(t, q.drained(1))

	q.drop(1)
	require.Empty(t, q.blocked, "the next owner reads the retry time off the row")
	require.Equal(t, []int64{1, 3}, q.heldIDs(), "row 2 is let go, rows in flight stay")
	require.Equal(t, int64(20), total)
	require.False(t, q.drained(1), "row 1 is still in flight")

	q.settle(q.inflight[1], true)
	q.goOn(engine.Aggregate{Type: "order", ID: "a"})
	require.Nil(t, q.head(), "a's dropped row must not come back")
	require.False(t, q.drained(1), "its ack is not recorded yet")
	acks := q.takeAcks()
	require.False(t, q.drained(1), "nor while being recorded")
	q.recorded(acks)
	require.True(t, q.drained(1))
	require.False(t, q.drained(2))
	require.Equal(t, int64(10), total)
}

func TestQueuesFreedCountsEveryRelease(t *testing.T) {
	q := newQueues(nil)
	q.push(testRow(1, "a", 0))
	before := q.freed
	q.forget(engine.Aggregate{Type: "order", ID: "a"})
	require.Greater(t, q.freed, before, "a claim waiting for room must see bytes freed")
	require.Empty(t, q.aggs)
}

func TestPartitionSetApply(t *testing.T) {
	ps := newPartitionSet(8)
	c := ps.apply(ownership{owned: []int{0, 1, 2, 3}, fair: 4, members: 2}, nil)
	require.True(t, c.gained)
	require.Equal(t, 4, ps.minShare)
	parts, any := ps.claimable()
	require.True(t, any)
	require.Equal(t, []int{0, 1, 2, 3}, parts)

	// A third relay joins: the fair share drops, the surplus is given back
	// once drained, and its rows are no longer kept meanwhile.
	c = ps.apply(ownership{owned: []int{0, 1, 2, 3}, fair: 2, members: 3}, nil)
	require.False(t, c.gained)
	require.Equal(t, []int{2, 3}, c.surplus)
	require.True(t, ps.keeps(1))
	require.False(t, ps.keeps(2), "being given back")
	require.True(t, ps.owned[2], "still owned until released")
	require.True(t, ps.settling())
	parts, _ = ps.claimable()
	require.Equal(t, []int{0, 1}, parts)

	q := newQueues(nil)
	q.push(testRow(1, "a", 3))
	q.send()
	require.Equal(t, []int{2}, ps.drainedReleasing(q), "partition 3 has a row in flight")

	c = ps.apply(ownership{owned: []int{0, 1, 3}, fair: 2, members: 3}, []int{2})
	require.Empty(t, c.lost)
	require.False(t, ps.owned[2])
	require.True(t, ps.releasing[3])

	// Its lease on 1 ran out and another relay took it.
	c = ps.apply(ownership{owned: []int{0, 3}, fair: 2, members: 3}, nil)
	require.Equal(t, []int{1}, c.lost)
	require.False(t, ps.keeps(1))

	require.Equal(t, []int{0, 3}, ps.giveUpAll())
	_, any = ps.claimable()
	require.False(t, any)
}

func TestPartitionSetClaimsEverythingWithNilWhenItOwnsAll(t *testing.T) {
	ps := newPartitionSet(4)
	ps.apply(ownership{owned: []int{0, 1, 2, 3}, fair: 4, members: 1}, nil)
	parts, any := ps.claimable()
	require.True(t, any)
	require.Nil(t, parts, "no partition filter: the claim reads the whole table")
	require.False(t, ps.settling())
}

// queueModel drives queues as the run loop does, through random claims,
// sends, acks, nacks with their retries, partitions given up and taken
// back, and recordings, over a few aggregates of a simulated table. After
// every step it checks that no aggregate has two rows in flight and that
// every row sent is its aggregate's oldest undelivered row.
type queueModel struct {
	t       *testing.T
	rng     *rand.Rand
	q       *queues
	now     time.Time
	nextID  int64
	pending map[int64]*modelRow // undelivered rows of the table, by id
}

type modelRow struct {
	id          int64
	agg         string
	availableAt time.Time
}

func modelPartition(agg string) int { return int(agg[len(agg)-1]-'0') % 2 }

// write adds rows to the table.
func (m *queueModel) write() {
	for range 1 + m.rng.IntN(4) {
		m.nextID++
		agg := "a" + strconv.Itoa(m.rng.IntN(5))
		m.pending[m.nextID] = &modelRow{id: m.nextID, agg: agg}
	}
}

// claim reads the undelivered rows not held, oldest first, as a claim from
// the oldest row does, and adds them as subscription.add does.
func (m *queueModel) claim() {
	held := map[int64]bool{}
	for _, id := range m.q.heldIDs() {
		held[id] = true
	}
	blocked := map[engine.Aggregate]bool{}
	for _, a := range m.q.stillBlocked(m.now) {
		blocked[a] = true
	}
	ids := slices.Sorted(maps.Keys(m.pending))
	limit := 1 + m.rng.IntN(8)
	for _, id := range ids {
		if limit == 0 {
			break
		}
		pr := m.pending[id]
		r := testRow(id, pr.agg, modelPartition(pr.agg))
		a := r.Aggregate()
		if held[id] || blocked[a] {
			continue
		}
		limit--
		if !m.q.unblock(a, true, m.now) {
			continue
		}
		if pr.availableAt.After(m.now) {
			m.q.block(a, r.Partition, pr.availableAt)
			continue
		}
		m.q.push(r)
	}
}

// sendSome sends rows while there are some and the dice say so, checking
// each one.
func (m *queueModel) sendSome() {
	for m.q.head() != nil && m.rng.IntN(4) > 0 {
		r := m.q.send()
		m.check("send")
		for _, pr := range m.pending {
			if pr.agg == r.AggregateID && pr.id < r.ID {
				m.t.Fatalf("row %d of %s sent before its older row %d was delivered", r.ID, r.AggregateID, pr.id)
			}
		}
	}
}

// settleOne acks or nacks a row in flight.
func (m *queueModel) settleOne() {
	ids := slices.Sorted(maps.Keys(m.q.inflight))
	if len(ids) == 0 {
		return
	}
	r := m.q.inflight[ids[m.rng.IntN(len(ids))]]
	if m.rng.IntN(3) > 0 {
		m.q.settle(r, true)
		delete(m.pending, r.ID)
		m.q.goOn(r.Aggregate())
		return
	}
	m.q.settle(r, false)
	until := m.now.Add(time.Duration(1+m.rng.IntN(3)) * time.Second)
	m.pending[r.ID].availableAt = until
	m.q.block(r.Aggregate(), r.Partition, until)
}

// check asserts that no aggregate has two rows in flight.
func (m *queueModel) check(op string) {
	per := map[engine.Aggregate]int{}
	for _, r := range m.q.inflight {
		per[r.Aggregate()]++
		if per[r.Aggregate()] > 1 {
			m.t.Fatalf("after %s: two rows of %s in flight", op, r.AggregateID)
		}
	}
}

func TestQueuesNeverSendTwoRowsOfAnAggregateAtOnce(t *testing.T) {
	for seed := range uint64(50) {
		m := &queueModel{t: t, rng: rand.New(rand.NewPCG(seed, 0)), q: newQueues(nil), now: time.Unix(1000, 0),
			pending: map[int64]*modelRow{}}
		for range 500 {
			var op string
			switch m.rng.IntN(8) {
			case 0:
				op = "write"
				m.write()
			case 1, 2:
				op = "claim"
				m.claim()
			case 3, 4:
				op = "send"
				m.sendSome()
			case 5:
				op = "settle"
				m.settleOne()
			case 6:
				// A partition given up (lost, surplus, or everything after
				// a failed renewal): its rows in flight stay, the rest go.
				op = "drop"
				m.q.drop(m.rng.IntN(2))
			case 7:
				op = "time and record"
				m.now = m.now.Add(time.Duration(m.rng.IntN(1500)) * time.Millisecond)
				m.q.recorded(m.q.takeAcks())
			}
			m.check(op)
		}
	}
}
