package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/pgschema"
	"github.com/entoutbox/entoutbox/relay"
)

// A Subscriber reading many topics holds one session for the liveness
// locks of all its subscriptions, and the Subscribers of one database in a
// process share one LISTEN connection and a few claim connections: a
// program that subscribes per topic, as Watermill programs do, does not
// hold connections per topic. Thirteen subscriptions of two Subscribers
// work on a pool of 9 connections (they used to hold two each).
func TestSubscribersShareTheirConnections(t *testing.T) {
	b := setupEmit(t)
	db, err := pgschema.Open(b.db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	// 2 liveness sessions, 1 LISTEN, up to 4 claims, 1 for the rest, and
	// the scheduled events' promoter's LISTEN, which the two share too.
	db.SetMaxOpenConns(9)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	const topics = 12
	cfg := relay.SubscriberConfig{Partitions: 4, PollInterval: 20 * time.Millisecond}
	many, err := relay.NewSubscriber(db, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = many.Close() })
	one, err := relay.NewSubscriber(db, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = one.Close() })
	got := newReceived()
	subscribe := func(s *relay.Subscriber, topic string) {
		msgs, err := s.Subscribe(ctx, topic)
		if err != nil {
			t.Errorf("subscribing to %s: %v", topic, err)
			return
		}
		go consume(ctx, msgs, got)
	}
	// A Subscriber holding connections per subscription would wait for
	// the pool here.
	subscribed := make(chan struct{})
	go func() {
		defer close(subscribed)
		subscribe(many, "orders")
		for i := range topics - 1 {
			subscribe(many, fmt.Sprintf("topic_%d", i))
		}
		subscribe(one, "orders")
	}()
	select {
	case <-subscribed:
	case <-time.After(patience):
		t.Fatalf("%d subscriptions on a pool of 9 connections did not all start", topics+1)
	}

	// Each subscription holds its lock under its own name: 13 locks, on
	// one session per Subscriber.
	key := `hashtextextended('entoutbox live outbox_events ' || r.relay, 0)`
	var locks, sessions int
	require.Eventually(t, func() bool {
		require.NoError(t, b.db.DB.QueryRow(`SELECT count(*), count(DISTINCT l.pid) FROM pg_locks l JOIN outbox_events_relays r
			ON l.classid::bigint = (`+key+` >> 32) & 4294967295 AND l.objid::bigint = `+key+` & 4294967295
			WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1`).Scan(&locks, &sessions))
		return locks == topics+1
	}, patience, 20*time.Millisecond, "the subscriptions' liveness locks are not all held (%d)", locks)
	require.Equal(t, 2, sessions, "liveness sessions for 2 Subscribers of %d subscriptions", topics+1)

	require.Eventually(t, func() bool { return relay.ListenerPID(many) != 0 }, patience, 10*time.Millisecond)
	require.Equal(t, relay.ListenerPID(many), relay.ListenerPID(one), "the two Subscribers listen on different sessions")

	// And they deliver, the two "orders" subscriptions sharing the rows.
	want := emitOrders(t, b.client, 40, 8, 0)
	got.waitFor(t, want, patience)
}
