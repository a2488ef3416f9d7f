package broker

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// natsStream connects to the test server's JetStream for checks and
// clean-up.
func natsStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// natsSetup deletes the stream the test's topic gets.
func natsSetup(t *testing.T, topic string) string {
	need(t, "NATS", natsURL)
	js := natsStream(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, natsName(topic)); err != nil {
			t.Logf("deleting stream %s: %v", natsName(topic), err)
		}
	})
	return natsURL
}

// natsChecks checks JetStream stored each message with Nats-Msg-Id = UUID.
func natsChecks(ctx context.Context, t *testing.T, _, topic, _ string) func([]sentMessage) {
	js := natsStream(t)
	return func(sent []sentMessage) {
		stream, err := js.Stream(ctx, natsName(topic))
		require.NoError(t, err)
		for i, m := range sent {
			raw, err := stream.GetMsg(ctx, uint64(i+1))
			require.NoError(t, err)
			assert.Equal(t, m.uuid, raw.Header.Get(nats.MsgIdHdr), "Nats-Msg-Id of message %d", i)
		}
	}
}

// TestNATSDeduplicates publishes a message twice: JetStream keeps one.
func TestNATSDeduplicates(t *testing.T) {
	t.Parallel()
	topic := "entoutbox.dedupe." + randomSuffix()
	rawURL := natsSetup(t, topic)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := Open(ctx, rawURL, Options{})
	require.NoError(t, err)
	defer b.Close()

	id := watermill.NewUUID()
	require.NoError(t, b.Publisher().Publish(topic, message.NewMessage(id, []byte(`{"a":1}`))))
	require.NoError(t, b.Publisher().Publish(topic, message.NewMessage(id, []byte(`{"a":1}`))))
	require.NoError(t, b.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte(`{"a":2}`))))

	stream, err := natsStream(t).Stream(ctx, natsName(topic))
	require.NoError(t, err)
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 2, info.State.Msgs)
}

// TestNATSGroupShares checks two members of a group split the messages and
// another group gets them all.
func TestNATSGroupShares(t *testing.T) {
	t.Parallel()
	topic := "entoutbox.share." + randomSuffix()
	testGroupShares(t, natsSetup(t, topic), topic)
}

func TestNATSMarshalerRefusesLossyMetadata(t *testing.T) {
	for _, md := range []map[string]string{
		{"k": " padded"},
		{"k": "two\nlines"},
		{"bad:key": "v"},
		{"": "v"},
		{"Nats-Msg-Id": "x"},
	} {
		msg := message.NewMessage(watermill.NewUUID(), nil)
		msg.Metadata = md
		_, err := natsMarshaler{}.Marshal("t", msg)
		assert.Error(t, err, "%q", md)
	}
	msg := message.NewMessage("id-1", []byte("p"))
	msg.Metadata.Set("k", "v w")
	nm, err := natsMarshaler{}.Marshal("t", msg)
	require.NoError(t, err)
	assert.Equal(t, "id-1", nm.Header.Get(nats.MsgIdHdr))
	back, err := natsMarshaler{}.Unmarshal(nm)
	require.NoError(t, err)
	assert.Equal(t, "id-1", back.UUID)
	assert.Equal(t, map[string]string{"k": "v w"}, map[string]string(back.Metadata))
}

func TestNATSName(t *testing.T) {
	assert.Equal(t, "orders", natsName("orders"))
	assert.Equal(t, "g-1_x", natsName("g-1_x"))
	dotted := natsName("orders.created")
	assert.Regexp(t, `^orders_created_[0-9a-f]{8}$`, dotted)
	assert.NotEqual(t, natsName("orders_created"), dotted)
	assert.NotEqual(t, natsName("a b"), natsName("a*b"))
	assert.LessOrEqual(t, len(natsName(string(make([]byte, 500)))), natsNameMax+9)
	assert.NotEmpty(t, natsName(""))
}
