package relay_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/relay"
)

// TestSubscribeOutlivesAnEndedOwnershipTransaction holds that a first
// join whose ownership transaction PostgreSQL ended (it sat idle past the
// relay's limit, as a process starved of CPU can leave it) is tried again:
// Subscribe succeeds, and the subscription delivers.
func TestSubscribeOutlivesAnEndedOwnershipTransaction(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub, err := relay.NewSubscriber(b.db.DB, relay.SubscriberConfig{Partitions: 1, PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	var calls atomic.Int32
	relay.OnOwnerTx(sub, func(ctx context.Context) error {
		if calls.Add(1) == 1 {
			// Idle in the transaction well past the limit (1 s): the
			// server ends the session.
			time.Sleep(3 * time.Second)
		}
		return nil
	})
	msgs, err := sub.Subscribe(ctx, relay.AllTopics)
	require.NoError(t, err, "the first join must be tried again after its transaction was ended")
	require.GreaterOrEqual(t, calls.Load(), int32(2), "the join was not tried again")

	id := emitOnePaid(t, b.client)
	select {
	case msg := <-msgs:
		require.Equal(t, id.String(), msg.UUID)
		msg.Ack()
	case <-time.After(patience):
		t.Fatal("nothing delivered after the join was tried again")
	}
}
