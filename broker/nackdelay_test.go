package broker

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
)

// A message nacked with events.MetaNackDelay comes again after the delay,
// not at once: the member gets the next message meanwhile. (Time bounds
// here are lower bounds, which a loaded machine only lengthens.)
func TestNATSNackDelay(t *testing.T) {
	t.Parallel()
	ctx, b, topic, sent := natsPublished(t, "nackdelay", "?max_in_flight=1", 2)
	_, ch := natsMember(ctx, t, b, "g", topic)
	testNackDelay(ctx, t, ch, sent, 3*time.Second)
}

func testNackDelay(ctx context.Context, t *testing.T, ch <-chan *message.Message, sent []sentMessage, delay time.Duration) {
	t.Helper()
	first := unacked(ctx, t, ch)
	require.Equal(t, sent[0].uuid, first.UUID)
	first.Metadata.Set(events.MetaNackDelay, delay.String())
	nacked := time.Now()
	first.Nack()
	next := unacked(ctx, t, ch)
	require.Equal(t, sent[1].uuid, next.UUID, "the member moved on")
	next.Ack()
	again := unacked(ctx, t, ch)
	require.Equal(t, sent[0].uuid, again.UUID, "the nacked message came again")
	require.GreaterOrEqual(t, time.Since(nacked), delay-500*time.Millisecond, "it came again before its delay")
	again.Ack()
}
