package natsembed_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/broker/natsembed"
)

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	srv, err := natsembed.Start(dir)
	require.NoError(t, err)
	defer srv.Shutdown()
	assert.True(t, strings.HasPrefix(srv.URL(), "nats://127.0.0.1:"), srv.URL())
	assert.NotEqual(t, "nats://127.0.0.1:4222", srv.URL())

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := broker.Open(ctx, srv.URL(), broker.Options{})
	require.NoError(t, err)
	defer b.Close()

	sub, err := b.Subscriber("example")
	require.NoError(t, err)
	ch, err := sub.Subscribe(ctx, "orders.created")
	require.NoError(t, err)
	sent := message.NewMessage(watermill.NewUUID(), []byte(`{"id":1}`))
	sent.Metadata.Set("outbox_aggregate_id", "order-1")
	require.NoError(t, b.Publisher().Publish("orders.created", sent))

	select {
	case got := <-ch:
		got.Ack()
		assert.Equal(t, sent.UUID, got.UUID)
		assert.Equal(t, `{"id":1}`, string(got.Payload))
		assert.Equal(t, "order-1", got.Metadata.Get("outbox_aggregate_id"))
	case <-ctx.Done():
		t.Fatal("no message")
	}
	require.NoError(t, b.Close())

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.NotEmpty(t, entries, "JetStream stored nothing in %s", dir)
}

func TestTempStore(t *testing.T) {
	a, err := natsembed.Start("")
	require.NoError(t, err)
	b, err := natsembed.Start("")
	require.NoError(t, err)
	assert.NotEqual(t, a.URL(), b.URL())
	a.Shutdown()
	b.Shutdown()
}
