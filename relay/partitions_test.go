package relay_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/pgschema"
	"github.com/entoutbox/entoutbox/internal/tcpproxy"
	"github.com/entoutbox/entoutbox/relay"
)

// owners reads how many partitions each relay owns (none before the first
// relay created the table).
func owners(t *testing.T, b *emitBundle) map[string]int {
	t.Helper()
	var exists bool
	require.NoError(t, b.db.DB.QueryRow(`SELECT to_regclass('outbox_events_partitions') IS NOT NULL`).Scan(&exists))
	if !exists {
		return nil
	}
	rows, err := b.db.DB.Query(`SELECT relay, count(*) FROM outbox_events_partitions WHERE until >= now() GROUP BY relay`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var relayName string
		var n int
		require.NoError(t, rows.Scan(&relayName, &n))
		out[relayName] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// Two relays share the partitions half and half; when one stops, the
// other takes them all at once (no lease to wait for: they were given
// back). Through it all every event arrives once, in order per aggregate.
func TestRelaysSharePartitionsAndHandThemOver(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Blocking until the consumer acks: otherwise gochannel may hand over
	// two messages published one after the other in either order.
	pubsub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 10000, Persistent: true, BlockPublishUntilSubscriberAck: true},
		watermill.NopLogger{})
	msgs, err := pubsub.Subscribe(ctx, "orders")
	require.NoError(t, err)
	got := newReceived()
	go consume(ctx, msgs, got)

	start := func(id string) func() error {
		cfg := quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: pubsub,
			Fast: relay.FastConfig{RelayID: id, Partitions: 16}})
		return runRelay(t, cfg)
	}
	stopA := start("a")
	stopB := start("b")
	require.Eventually(t, func() bool {
		o := owners(t, b)
		return len(o) == 2 && o[keyWithPrefix(o, "a/")] == 8 && o[keyWithPrefix(o, "b/")] == 8
	}, patience, 20*time.Millisecond, "partitions not shared out: %v", owners(t, b))

	first := emitOrdersAs(t, b.client, "first", 300, 40, 0)
	got.waitFor(t, first, patience)

	require.NoError(t, stopA())
	require.Eventually(t, func() bool {
		o := owners(t, b)
		return len(o) == 1 && o[keyWithPrefix(o, "b/")] == 16
	}, relay.DefaultLease/2, 20*time.Millisecond, "b did not take a's partitions (before their lease ran out): %v", owners(t, b))

	second := emitOrdersAs(t, b.client, "second", 300, 40, 0)
	got.waitFor(t, second, patience)
	waitDelivered(t, b, 0)
	require.NoError(t, stopB())

	all := emitted{ids: map[string]bool{}, rolledBack: map[string]bool{}, perAggregate: map[string][]string{}}
	for _, e := range []emitted{first, second} {
		for id := range e.ids {
			all.ids[id] = true
		}
		for agg, ids := range e.perAggregate {
			all.perAggregate[agg] = ids
		}
	}
	got.requireExactly(t, all)
}

// A relay configured with another number of partitions than the table's
// refuses to run rather than split aggregates another way.
func TestRelayRefusesAnotherPartitionCount(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	pubsub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	stop := runRelay(t, quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: pubsub,
		Fast: relay.FastConfig{Partitions: 8}}))
	require.Eventually(t, func() bool { return len(owners(t, b)) == 1 }, patience, 20*time.Millisecond)
	require.NoError(t, stop())

	sub, err := relay.NewSubscriber(b.db.DB, relay.SubscriberConfig{Partitions: 16})
	require.NoError(t, err)
	defer sub.Close()
	_, err = sub.Subscribe(context.Background(), relay.AllTopics)
	require.EqualError(t, err, "relay: outbox_events_partitions has 8 partitions and this relay is set to 16: every relay of a table must use the same number")
}

// A number of partitions out of bounds is refused before anything is
// written.
func TestSubscriberRefusesAPartitionCountOutOfBounds(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	for _, n := range []int{-1, 4097} {
		_, err := relay.NewSubscriber(b.db.DB, relay.SubscriberConfig{Partitions: n})
		require.EqualError(t, err, fmt.Sprintf("relay: SubscriberConfig.Partitions must be between 1 and 4096, not %d", n))
	}
}

func keyWithPrefix(m map[string]int, prefix string) string {
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			return k
		}
	}
	return ""
}

// Subscribers join and leave while a stream is read with small batches and
// slow consumers, so that partitions change hands often while rows are
// held: every event arrives once, in order per aggregate.
func TestSubscribersJoiningAndLeavingDeliverOnceInOrder(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	want := emitOrdersAs(t, b.client, "churn", 1500, 30, 0)
	got := newReceived()
	cfg := relay.SubscriberConfig{Partitions: 8, BatchSize: 16, Lease: 2 * time.Second, PollInterval: 20 * time.Millisecond}
	read := func(ctx context.Context, sub *relay.Subscriber) {
		msgs, err := sub.Subscribe(ctx, relay.AllTopics)
		if !assert.NoError(t, err) {
			return
		}
		for msg := range msgs {
			time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
			got.add(msg)
			msg.Ack()
		}
	}
	steady, err := relay.NewSubscriber(b.db.DB, cfg)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { defer close(done); read(context.Background(), steady) }()

	for range 6 {
		visitor, err := relay.NewSubscriber(b.db.DB, cfg)
		require.NoError(t, err)
		visited := make(chan struct{})
		go func() { defer close(visited); read(context.Background(), visitor) }()
		time.Sleep(150 * time.Millisecond)
		require.NoError(t, visitor.Close())
		<-visited
		time.Sleep(50 * time.Millisecond)
	}
	got.waitFor(t, want, patience)
	require.NoError(t, steady.Close())
	<-done
	got.requireExactly(t, want)
}

// A relay cut off from the database gives its partitions up after most of
// their lease, before another relay may take them over: the rows it held
// in memory are not sent by both.
func TestRelayCutOffFromTheDatabaseStopsSending(t *testing.T) {
	skipIfShort(t, "waits out a lease")
	t.Parallel()
	b := setupEmit(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	u, err := url.Parse(b.db.URL)
	require.NoError(t, err)
	proxy := tcpproxy.Start(t, u.Host)
	u.Host = proxy.Addr
	dbA, err := pgschema.Open(u.String())
	require.NoError(t, err)
	defer dbA.Close()

	want := emitOrdersAs(t, b.client, "fence", 50, 5, 0)
	cfg := relay.SubscriberConfig{Partitions: 4, Lease: 2 * time.Second, PollInterval: 20 * time.Millisecond}
	a, err := relay.NewSubscriber(dbA, cfg)
	require.NoError(t, err)
	defer a.Close()
	// Nobody reads a's messages yet: what it claims waits in its memory.
	fromA, err := a.Subscribe(ctx, relay.AllTopics)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		o := owners(t, b)
		return o[keyWithPrefix(o, "relay-")] == 4
	}, patience, 20*time.Millisecond)
	// a has claimed once it offers a message: take one and leave it
	// unacked, so that the rest of the claim waits in a's memory when the
	// database goes away.
	select {
	case msg := <-fromA:
		require.NotNil(t, msg)
	case <-time.After(patience):
		t.Fatal("the relay to be cut off claimed nothing")
	}
	proxy.Cut()

	other, err := relay.NewSubscriber(b.db.DB, cfg)
	require.NoError(t, err)
	fromOther, err := other.Subscribe(ctx, relay.AllTopics)
	require.NoError(t, err)
	got := newReceived()
	go consume(ctx, fromOther, got)
	got.waitFor(t, want, patience) // once a's leases have run out
	waitDelivered(t, b, 0)

	select {
	case msg := <-fromA:
		t.Fatalf("the relay cut off sent event %s after its partitions went to another", msg.UUID)
	case <-time.After(500 * time.Millisecond):
	}
	require.NoError(t, other.Close())
	got.requireExactly(t, want)
}
