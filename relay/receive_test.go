package relay_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
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

// receiveInProcess is an in-process broker (Watermill's gochannel, each
// publish blocking until the consumer acked it, so that two messages
// published one after the other arrive in that order) and what arrives on
// topic, acked, until the test ends.
func receiveInProcess(t *testing.T, topic string) (*gochannel.GoChannel, *received) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pubsub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 10000, Persistent: true, BlockPublishUntilSubscriberAck: true},
		watermill.NopLogger{})
	msgs, err := pubsub.Subscribe(ctx, topic)
	require.NoError(t, err)
	got := newReceived()
	go consume(ctx, msgs, got)
	return pubsub, got
}

// receiveOn subscribes the group prefix+"consumer" to prefix+"orders" on b
// and records what arrives until the test ends.
func receiveOn(t *testing.T, b broker.Broker, prefix string) *received {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sub, err := b.Subscriber(prefix + "consumer")
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	msgs, err := sub.Subscribe(ctx, prefix+"orders")
	require.NoError(t, err)
	got := newReceived()
	go consume(ctx, msgs, got)
	return got
}
