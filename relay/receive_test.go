package relay_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/broker"
)

// receiveAll subscribes group to topic on br and acks everything it gets
// into the returned received, until the test ends.
func receiveAll(t *testing.T, br broker.Broker, group, topic string) *received {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sub, err := br.Subscriber(group)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	msgs, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	got := newReceived()
	go consume(ctx, msgs, got)
	return got
}
