package relay

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// These run without PostgreSQL: queues and partitionSet are the fast
// path's books, kept apart from its I/O so that their rules can be tested
// alone. The tests with a database check the same rules end to end.

func testRow(id int64, agg string, partition int) *row {
	return &row{id: id, aggregateType: "order", aggregateID: agg, partition: partition, size: 10}
}

// sendAll sends every row that may be sent now, as the run loop does, and
// returns their ids.
func sendAll(q *queues) []int64 {
	var ids []int64
	for q.head() != nil {
		ids = append(ids, q.send().id)
	}
	return ids
}

func TestQueuesSendOneRowPerAggregateAtATimeInOrder(t *testing.T) {
	q := newQueues(nil)
	for _, r := range []*row{testRow(1, "a", 0), testRow(2, "b", 0), testRow(3, "a", 0), testRow(4, "a", 0)} {
		q.push(r)
	}
	require.Equal(t, []int64{1, 2}, sendAll(q), "one row of each aggregate goes out, the oldest")
	require.Nil(t, q.head(), "a's next row waits for the one in flight")

	q.settle(q.inflight[1], true)
	q.goOn(aggregate{"order", "a"})
	require.Equal(t, []int64{3}, sendAll(q))
	q.settle(q.inflight[2], true)
	q.goOn(aggregate{"order", "b"})
	require.Empty(t, sendAll(q), "b has nothing more")
	q.settle(q.inflight[3], true)
	q.goOn(aggregate{"order", "a"})
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
	a := aggregate{"order", "a"}
	q.push(testRow(1, "a", 3))
	q.push(testRow(2, "a", 3))
	require.Equal(t, []int64{1}, sendAll(q))
	q.settle(q.inflight[1], false)
	until := time.Unix(100, 0)
	q.block(a, 3, until)
	require.Nil(t, q.head(), "row 2 must not overtake row 1, which waits for its retry")
	require.Zero(t, q.held(), "the blocked aggregate's rows are let go, to be claimed again")
	require.Zero(t, q.bytes)

	require.Equal(t, []aggregate{a}, q.stillBlocked(until.Add(-time.Second)))
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
	q.block(aggregate{"order", "c"}, 1, time.Unix(100, 0))
	require.Equal(t, []int64{1, 3}, sendAll(q))
	require.Equal(t, int64(30), total)
	require.False(t, q.drained(1))

	q.drop(1)
	require.Empty(t, q.blocked, "the next owner reads the retry time off the row")
	require.Equal(t, []int64{1, 3}, q.heldIDs(), "row 2 is let go, rows in flight stay")
	require.Equal(t, int64(20), total)
	require.False(t, q.drained(1), "row 1 is still in flight")

	q.settle(q.inflight[1], true)
	q.goOn(aggregate{"order", "a"})
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
	q.forget(aggregate{"order", "a"})
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
