package relay_test

import (
	"context"
	"testing"
	"time"

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
	}, 10*time.Second, 20*time.Millisecond, "a %+v, b %+v", a.Status(), bs.Status())

	require.NoError(t, a.Close())
	require.Equal(t, relay.SubscriberStatus{}, a.Status(), "closed")
}
