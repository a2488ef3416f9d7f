package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/relay"
)

// The Subscriber settles what its consumer says: an ack records the row
// delivered and ends the message's context; a nack is a failed attempt,
// tried again and dead-lettered after MaxAttempts.
func TestSubscriberSettlesAcksAndNacks(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	acked := insertRow(t, b, "orders", "a", `{}`)
	nacked := insertRow(t, b, "orders", "b", `{}`)

	sub, err := relay.NewSubscriber(b.db.DB, relay.SubscriberConfig{MaxAttempts: 2, InitialBackoff: 20 * time.Millisecond,
		PollInterval: 20 * time.Millisecond, Logger: watermill.NopLogger{}})
	require.NoError(t, err)
	defer sub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := sub.Subscribe(ctx, relay.AllTopics)
	require.NoError(t, err)

	seen := map[string]int{}
	deadline := time.After(patience)
	for done := false; !done; {
		select {
		case msg := <-msgs:
			seen[msg.UUID]++
			switch msg.UUID {
			case acked:
				msg.Ack()
				select {
				case <-msg.Context().Done():
				case <-time.After(patience):
					t.Fatal("the context of an acked message did not end")
				}
			case nacked:
				msg.Nack()
			}
		case <-time.After(20 * time.Millisecond):
			backlog, err := relay.ReadBacklog(context.Background(), b.db.DB, "", "")
			require.NoError(t, err)
			done = backlog.Pending == 0 && backlog.DeadLetters == 1
		case <-deadline:
			t.Fatalf("rows still pending; seen %v", seen)
		}
	}
	require.Equal(t, 1, seen[acked])
	require.Equal(t, 2, seen[nacked], "nacked once, retried, nacked again: its last attempt")
	require.Equal(t, map[string]deadLetter{
		nacked: {reason: "nacked by the subscriber's consumer (after 2 attempts)", attempts: 2},
	}, deadLetters(t, b))
}
