package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/relay"
)

// The LISTEN connection is cut again and again: after each loss the
// subscriber listens again within moments, not after a wait that grew
// with every earlier blip, and a row committed then is delivered at once,
// woken by its notification (polling is far too slow to deliver it).
func TestListenReconnectsPromptlyAfterEachLoss(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	sub, err := relay.NewSubscriber(b.db.DB, relay.SubscriberConfig{PollInterval: time.Minute, Lease: 3 * time.Second})
	require.NoError(t, err)
	relay.SetRescanEvery(sub, 10*time.Minute) // only a notification or a poll wakes a row
	t.Cleanup(func() { _ = sub.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := sub.Subscribe(ctx, relay.AllTopics)
	require.NoError(t, err)
	got := newReceived()
	go consume(ctx, msgs, got)

	listener := func() uint32 {
		var pid uint32
		require.Eventually(t, func() bool { pid = relay.ListenerPID(sub); return pid != 0 }, patience, time.Millisecond)
		return pid
	}
	pid := listener()
	for i := range 7 {
		// Only this test's own listening session, by its backend pid.
		var killed bool
		require.NoError(t, b.db.DB.QueryRow(`SELECT pg_terminate_backend($1)`, int64(pid)).Scan(&killed))
		require.True(t, killed)
		cut := time.Now()
		var again uint32
		require.Eventually(t, func() bool { again = relay.ListenerPID(sub); return again != 0 && again != pid },
			patience, time.Millisecond)
		took := time.Since(cut)
		// 2.5 s: a wait that kept doubling from 100 ms would be 3.2 s by the sixth loss.
		require.Less(t, took, 2500*time.Millisecond, "loss %d: listening again took %s", i+1, took)
		pid = again
		want := emitOrdersAs(t, b.client, "listen", 1, 1, 0)
		sent := time.Now()
		got.waitFor(t, want, patience)
		require.Less(t, time.Since(sent), 20*time.Second, "loss %d: delivery after the reconnect (polling is every minute)", i+1)
		t.Logf("loss %d: listening again after %s, delivered after %s", i+1, took.Round(time.Millisecond), time.Since(sent).Round(time.Millisecond))
	}
}
