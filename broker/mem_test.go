package broker

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMemLateSubscriber checks a group that subscribes after a Publish still
// gets the message.
func TestMemLateSubscriber(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	b, err := Open(ctx, "mem://", Options{})
	require.NoError(t, err)
	defer b.Close()

	sent := newMessages(3)
	publish(t, b, "late", sent)
	own := sent[0].message()
	require.NoError(t, b.Publisher().Publish("other", own))
	assert.Equal(t, sent[0].metadata, map[string]string(own.Metadata), "Publish changed the caller's message")
	sub, err := b.Subscriber("g")
	require.NoError(t, err)
	ch, err := sub.Subscribe(ctx, "late")
	require.NoError(t, err)
	assertSame(t, sent, receive(ctx, t, ch, len(sent)), false)
}

func TestMemGroupShares(t *testing.T) {
	t.Parallel()
	testGroupShares(t, "mem://", "share")
}

// TestMemAbandonedMessage checks a message a member received but did not
// ack goes to another member when the first one stops.
func TestMemAbandonedMessage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	b, err := Open(ctx, "mem://", Options{})
	require.NoError(t, err)
	defer b.Close()

	first, err := b.Subscriber("g")
	require.NoError(t, err)
	ch, err := first.Subscribe(ctx, "t")
	require.NoError(t, err)
	sent := newMessages(1)
	publish(t, b, "t", sent)
	m := <-ch
	assert.Equal(t, sent[0].uuid, m.UUID)
	require.NoError(t, first.Close()) // without acking m

	second, err := b.Subscriber("g")
	require.NoError(t, err)
	ch2, err := second.Subscribe(ctx, "t")
	require.NoError(t, err)
	assertSame(t, sent, receive(ctx, t, ch2, 1), false)
}
