package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/relay"
)

// countingPublisher counts what one relay published.
type countingPublisher struct {
	message.Publisher
	n atomic.Int64
}

func (p *countingPublisher) Publish(topic string, msgs ...*message.Message) error {
	err := p.Publisher.Publish(topic, msgs...)
	if err == nil {
		p.n.Add(int64(len(msgs)))
	}
	return err
}

// On SQLite one relay relays at a time: a second one on the same file
// waits, publishing nothing, while the first holds the outbox's lease, and
// takes over when it stops; every event arrives once, each aggregate in
// its order.
func TestPollRelaysOneAtATime(t *testing.T) {
	t.Parallel()
	b := setupEmitSQLite(t)
	pubsub, got := receiveInProcess(t, "orders")
	first, second := &countingPublisher{Publisher: pubsub}, &countingPublisher{Publisher: pubsub}

	stopFirst := runRelay(t, quick(relay.PathPoll, relay.Config{DB: b.sql, Publisher: first}))
	before := emitOrders(t, b.client, 100, 5, 0)
	got.waitFor(t, before, patience)
	stopSecond := runRelay(t, quick(relay.PathPoll, relay.Config{DB: b.sql, Publisher: second}))
	during := emitOrders(t, b.client, 100, 5, 0)
	got.waitFor(t, during, patience)
	time.Sleep(500 * time.Millisecond) // long enough for a second relay that does not wait to publish (not a bound on the first)
	require.Zero(t, second.n.Load(), "the second relay published while the first held the lease")

	require.NoError(t, stopFirst())
	after := emitOrders(t, b.client, 100, 5, 0)
	got.waitFor(t, after, patience)
	require.Positive(t, second.n.Load(), "the second relay did not take over")
	require.NoError(t, stopSecond())

	all := emitted{ids: map[string]bool{}, perAggregate: map[string][]string{}}
	for _, e := range []emitted{before, during, after} {
		for id := range e.ids {
			all.ids[id] = true
		}
		for agg, ids := range e.perAggregate {
			all.perAggregate[agg] = append(all.perAggregate[agg], ids...)
		}
	}
	got.requireExactly(t, all)
}

// On MariaDB relays share the outbox, each relaying its share of the
// partitions: a relay that joins takes the ones the others give back, and
// one that stops hands its own over, while events flow through a broker
// slow enough that publishes are in flight at each hand-over. Every event
// arrives once (a partition changes hands only once nothing of it is in
// flight and its acks are recorded), each aggregate in its order, and
// every relay publishes its part.
func TestPollRelaysShareTheOutboxOnMariaDB(t *testing.T) {
	t.Parallel()
	b := setupEmitMySQL(t)
	pubsub, got := receiveInProcess(t, "orders")
	slow := &slowPublisher{Publisher: pubsub, every: 40, delay: 1500 * time.Millisecond}
	relays := []*countingPublisher{{Publisher: slow}, {Publisher: slow}, {Publisher: slow}}
	start := func(i int) func() error {
		return runRelay(t, quick(relay.PathPoll, relay.Config{DB: b.sql, Publisher: relays[i], Concurrency: 8}))
	}

	// A writer emits rounds of 100 events over 20 aggregates of their own
	// until the relays have all joined and left.
	var (
		all     = emitted{ids: map[string]bool{}, rolledBack: map[string]bool{}, perAggregate: map[string][]string{}}
		writing = make(chan struct{})
		wrote   = make(chan struct{})
	)
	go func() {
		defer close(wrote)
		for round := 0; ; round++ {
			select {
			case <-writing:
				return
			default:
			}
			all.add(emitOrdersAs(t, b.client, fmt.Sprintf("round%d", round), 100, 20, 0))
		}
	}()
	stopFirst := start(0)
	require.Eventually(t, func() bool { return relays[0].n.Load() > 100 }, patience, 20*time.Millisecond)
	stopSecond, stopThird := start(1), start(2) // the first gives their share back
	require.Eventually(t, func() bool { return relays[1].n.Load() > 200 && relays[2].n.Load() > 200 },
		patience, 20*time.Millisecond, "the relays that joined were given no partitions")
	require.NoError(t, stopSecond())
	before := relays[0].n.Load()
	require.Eventually(t, func() bool { return relays[0].n.Load() > before+200 }, patience, 20*time.Millisecond)
	require.NoError(t, stopThird())
	close(writing)
	<-wrote
	got.waitFor(t, all, patience)
	require.NoError(t, stopFirst())
	got.requireExactly(t, all)
	t.Logf("%d events; published by each relay: %d, %d, %d", len(all.ids), relays[0].n.Load(), relays[1].n.Load(), relays[2].n.Load())
}

// slowPublisher takes delay over every every-th publish: such a publish
// is in flight for longer than a relay takes to renew its leases, and
// when partitions change hands.
type slowPublisher struct {
	message.Publisher
	every int64
	delay time.Duration
	n     atomic.Int64
}

func (p *slowPublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.n.Add(1)%p.every == 0 {
		time.Sleep(p.delay)
	}
	return p.Publisher.Publish(topic, msgs...)
}

// A MariaDB relay whose lease renewals stall (the lease rows locked by
// another transaction) publishes nothing once its lease may have run out,
// by its own clock, while events keep coming; it goes on when the
// renewal goes through, and nothing is lost.
func TestPollRelayPublishesNothingPastItsLeaseOnMariaDB(t *testing.T) {
	t.Parallel()
	b := setupEmitMySQL(t)
	pubsub, got := receiveInProcess(t, "orders")
	pub := &startsPublisher{Publisher: pubsub} // when each publish began
	pub.free.Store(1 << 40)
	stop := runRelay(t, quick(relay.PathPoll, relay.Config{DB: b.sql, Publisher: pub}))
	all := emitted{ids: map[string]bool{}, rolledBack: map[string]bool{}, perAggregate: map[string][]string{}}
	first := emitOrdersAs(t, b.client, "before", 50, 5, 0)
	all.add(first)
	got.waitFor(t, first, patience)

	ctx := context.Background()
	lock, err := b.sql.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback() }()
	_, err = lock.ExecContext(ctx, "SELECT * FROM outbox_events_relay_lease FOR UPDATE")
	require.NoError(t, err)
	locked := time.Now() // the last renewal began before: the lease runs 2s from then at most

	for round := 0; time.Since(locked) < 6*time.Second; round++ {
		all.add(emitOrdersAs(t, b.client, fmt.Sprintf("stalled%d", round), 10, 5, 0))
		time.Sleep(50 * time.Millisecond)
	}
	// The fence is 2s on; a publish the relay let through before it
	// begins at once, so a second more is room for a busy machine, not a
	// speed claim.
	fence := locked.Add(3 * time.Second)
	pub.mu.Lock()
	for _, at := range pub.starts {
		require.False(t, at.After(fence), "a publish began %s after the lock, past its lease: its renewal stalled", at.Sub(locked))
	}
	pub.mu.Unlock()

	require.NoError(t, lock.Rollback())
	got.waitFor(t, all, patience)
	require.NoError(t, stop())
	got.requireExactly(t, all)
}

// On MariaDB the relay makes the undelivered rows' index when it starts
// (MySQL has no partial index): its reads of the undelivered rows then
// find them through it instead of walking every delivered row kept.
func TestRelayMakesTheUndeliveredIndexOnMariaDB(t *testing.T) {
	t.Parallel()
	b := setupEmitMySQL(t)
	pubsub, got := receiveInProcess(t, "orders")
	stop := runRelay(t, quick(relay.PathPoll, relay.Config{DB: b.sql, Publisher: pubsub}))
	want := emitOrders(t, b.client, 20, 4, 0)
	got.waitFor(t, want, patience)
	require.NoError(t, stop())

	var key sql.NullString
	rows, err := b.sql.Query("EXPLAIN SELECT id FROM outbox_events WHERE delivered_at IS NULL AND id > 0 ORDER BY id LIMIT 100")
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	require.True(t, rows.Next())
	values := make([]any, len(cols))
	for i, c := range cols {
		values[i] = new(sql.RawBytes)
		if c == "key" {
			values[i] = &key
		}
	}
	require.NoError(t, rows.Scan(values...))
	require.Equal(t, "outbox_events_undelivered", key.String, "the read of the undelivered rows does not use their index")
}
