package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
)

type detachKey struct{}

// A message of a partition that moves to another member keeps a live
// context (its handler finishes applying it) and its values; it ends with
// the member's subscription.
func TestMovedPartitionsMessagesFinish(t *testing.T) {
	member, stopMember := context.WithCancel(context.Background())
	defer stopMember()
	partition, stopPartition := context.WithCancel(context.WithValue(member, detachKey{}, "v"))
	msg := message.NewMessage("m", nil)
	msg.SetContext(partition)
	detach(member, msg)

	stopPartition()
	time.Sleep(10 * time.Millisecond)
	require.NoError(t, msg.Context().Err(), "the partition moved: the handler goes on")
	require.Equal(t, "v", msg.Context().Value(detachKey{}))
	stopMember()
	select {
	case <-msg.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the member's subscription ended and the message's context did not")
	}

	acked := message.NewMessage("a", nil)
	acked.SetContext(context.Background())
	detach(context.Background(), acked)
	acked.Ack()
	select {
	case <-acked.Context().Done(): // released once settled
	case <-time.After(10 * time.Second):
		t.Fatal("a settled message's context is not released")
	}
}
