package relay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/relay"
)

// A subscriber owning its partitions is Live; a second one, short of its
// share while the first's leases hold them, says it is Waiting; Status
// counts what each owns.
func TestSubscriberStatus(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := relay.NewSubscriber(b.db.DB, relay.SubscriberConfig{RelayID: "a", Partitions: 8, Lease: 30 * time.Second})
	require.NoError(t, err)
	defer a.Close()
	require.Equal(t, relay.SubscriberStatus{}, a.Status(), "no subscription yet")
	_, err = a.Subscribe(ctx, relay.AllTopics)
	require.NoError(t, err)
	require.Equal(t, relay.SubscriberStatus{Partitions: 8, Live: true}, a.Status())

	// b joins: a must give half back once drained (it holds nothing, so at
	// once); until it does, b waits for its share.
	bs, err := relay.NewSubscriber(b.db.DB, relay.SubscriberConfig{RelayID: "b", Partitions: 8, Lease: 30 * time.Second})
	require.NoError(t, err)
	defer bs.Close()
	_, err = bs.Subscribe(ctx, relay.AllTopics)
	require.NoError(t, err)
	first := bs.Status()
	require.True(t, first.Waiting, "b joined short of its share: %+v", first)
	require.Eventually(t, func() bool {
		return a.Status() == relay.SubscriberStatus{Partitions: 4, Live: true} &&
			bs.Status() == relay.SubscriberStatus{Partitions: 4, Live: true}
	}, patience, 20*time.Millisecond, "a %+v, b %+v", a.Status(), bs.Status())

	require.NoError(t, a.Close())
	require.Equal(t, relay.SubscriberStatus{}, a.Status(), "closed")
}

// Ready fails while the relay does not run; while it runs, it passes as
// long as the subscriber may send, and says so when it may not: here its
// renewals fail (the partition table is renamed away) while the database
// still answers pings, until it is back.
func TestRelayReady(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	pubsub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	r, err := relay.New(quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: pubsub,
		Fast: relay.FastConfig{Partitions: 4, Lease: 2 * time.Second}}))
	require.NoError(t, err)
	ctx := context.Background()
	require.EqualError(t, r.Ready(ctx), "relay: not running")
	_, running := r.Status()
	require.False(t, running)

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	require.Eventually(t, func() bool { return r.Ready(ctx) == nil }, patience, 20*time.Millisecond)
	st, running := r.Status()
	require.True(t, running)
	require.Equal(t, relay.SubscriberStatus{Partitions: 4, Live: true}, st)

	_, err = b.db.DB.Exec(`ALTER TABLE outbox_events_partitions RENAME TO outbox_events_partitions_away`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		err := r.Ready(ctx)
		return err != nil && strings.Contains(err.Error(), "the subscriber may not send")
	}, patience, 20*time.Millisecond, "still ready: %v", r.Ready(ctx))
	_, err = b.db.DB.Exec(`ALTER TABLE outbox_events_partitions_away RENAME TO outbox_events_partitions`)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return r.Ready(ctx) == nil }, patience, 20*time.Millisecond,
		"not ready again: %v", r.Ready(ctx))

	stop()
	require.NoError(t, <-done)
	require.EqualError(t, r.Ready(ctx), "relay: not running")
}

// A WAL relay is ready, and says so in its status, while it streams its
// slot (active) and while it waits as the standby of another relay that
// streams it; before it runs it is not running, and once stopped not ready.
func TestWALRelayReadyAndStatus(t *testing.T) {
	t.Parallel()
	s := setupWAL(t)
	pubsub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	ctx := context.Background()
	start := func() (*relay.Relay, func()) {
		r, err := relay.New(s.config(relay.Config{Publisher: pubsub}))
		require.NoError(t, err)
		require.EqualError(t, r.Ready(ctx), "relay: not running")
		_, running := r.WALStatus()
		require.False(t, running)
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(runCtx) }()
		return r, func() {
			stop()
			require.NoError(t, <-done)
		}
	}
	role := func(r *relay.Relay, want relay.WALRole) {
		t.Helper()
		require.Eventually(t, func() bool {
			st, running := r.WALStatus()
			return running && st.Role == want && r.Ready(ctx) == nil
		}, patience, 20*time.Millisecond, "want %s and ready", want)
		st, _ := r.WALStatus()
		require.Equal(t, s.slot, st.Slot)
	}

	active, stopActive := start()
	role(active, relay.WALActive)
	standby, stopStandby := start()
	role(standby, relay.WALStandby)

	stopStandby()
	stopActive()
	require.EqualError(t, active.Ready(ctx), "relay: the WAL relay neither streams slot \""+s.slot+
		"\" nor waits as its standby (stopped)")
}
