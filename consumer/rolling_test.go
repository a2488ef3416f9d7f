package consumer_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/promtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/internal/testent/deadletter"
	"github.com/entoutbox/entoutbox/metrics"
	"github.com/entoutbox/entoutbox/outboxtest"
)

// newerVersion turns a message of the latest order.paid (version 2) into
// one of version 3, a version this code does not know, with a field only
// version 3 has, and the readable_from its producer set ("" for none).
func newerVersion(t *testing.T, msg *message.Message, readableFrom string) *message.Message {
	t.Helper()
	var fields map[string]any
	require.NoError(t, json.Unmarshal(msg.Payload, &fields))
	fields["note"] = "added in version 3"
	b, err := json.Marshal(fields)
	require.NoError(t, err)
	msg.Payload = b
	msg.Metadata.Set(events.MetaEventVersion, "3")
	if readableFrom != "" {
		msg.Metadata.Set(events.MetaReadableFrom, readableFrom)
	}
	return msg
}

// A consumer one version behind handles a newer version its producer says
// it can read, as its latest version; Meta keeps the version emitted.
func TestNewerVersionReadableAsLatestIsHandled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	h := testent.NewOutboxHandlers(b.client, fast()...)
	var (
		got  []testent.OrderPaid
		meta []events.Meta
	)
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		got, meta = append(got, *e), append(meta, m)
		return nil
	})
	for i, from := range []string{"2", "1"} {
		id := []string{"1", "2"}[i]
		msg := newerVersion(t, outboxtest.Message(t, testent.OrderPaid{OrderID: int64(i + 1), AmountCents: 500, Currency: "USD"}, id), from)
		require.NoError(t, h.Handle(ctx, "billing", msg))
	}
	require.Equal(t, []testent.OrderPaid{
		{OrderID: 1, AmountCents: 500, Currency: "USD"},
		{OrderID: 2, AmountCents: 500, Currency: "USD"},
	}, got)
	require.Len(t, meta, 2)
	require.Equal(t, 3, meta[0].Version, "the handler can tell what was emitted")
	require.Zero(t, b.client.DeadLetter.Query().CountX(ctx))

	// Read as version 2, it must still be a valid version 2.
	invalid := newerVersion(t, outboxtest.Message(t, testent.OrderPaid{OrderID: 3, AmountCents: 5}, "3"), "2")
	invalid.Payload = []byte(`{"order_id": 3, "amount_cents": -1, "currency": "EUR", "note": "x"}`)
	require.NoError(t, h.Handle(ctx, "billing", invalid))
	require.Len(t, got, 2)
	dl := b.client.DeadLetter.Query().OnlyX(ctx)
	require.Equal(t, `event "order.paid" version 3 read as version 2: events: invalid "order.paid" v2 payload: field "amount_cents" value -1 is not positive (JSON Schema entoutbox/schemas/order.paid.v2.json)`, dl.Reason)
	require.Equal(t, 3, dl.EventVersion)
}

// A newer version without readable_from, or readable only from a version
// this code does not know, is dead-lettered with what the operator does,
// counted, and does not hold up other aggregates.
func TestNewerVersionNotReadableIsDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithMetrics(m))...)
	var calls atomic.Int64
	h.OnOrderPaid("billing", invoiceHandler(&calls))

	none := newerVersion(t, outboxtest.Message(t, testent.OrderPaid{OrderID: 1, AmountCents: 5}, "1"), "")
	higher := newerVersion(t, outboxtest.Message(t, testent.OrderPaid{OrderID: 2, AmountCents: 5}, "2"), "3")
	garbled := newerVersion(t, outboxtest.Message(t, testent.OrderPaid{OrderID: 3, AmountCents: 5}, "3"), "two")
	current := outboxtest.Message(t, testent.OrderPaid{OrderID: 4, AmountCents: 5}, "4")
	for _, msg := range []*message.Message{none, higher, garbled, current} {
		require.NoError(t, h.Handle(ctx, "billing", msg))
	}
	require.Equal(t, int64(1), calls.Load(), "the other aggregate is handled")
	require.Equal(t, 1, b.invoices(t, "billing"))

	const reason = "event \"order.paid\" version 3 is newer than the newest this code knows (2) and not readable as version 2; " +
		"deploy the consumer that knows it, then `entoutbox dead-letters retry`"
	dls := b.client.DeadLetter.Query().Order(deadletter.ByAggregateID()).AllX(ctx)
	require.Len(t, dls, 3)
	for i, dl := range dls {
		require.Equal(t, []string{"1", "2", "3"}[i], dl.AggregateID)
		require.Equal(t, reason, dl.Reason)
		require.Equal(t, 3, dl.EventVersion, "the dead letter keeps the version emitted, for the retry")
		require.Equal(t, "billing", dl.Source)
	}
	require.Equal(t, 3.0, promtest.Value(t, reg, "entoutbox_consumer_deliveries_total",
		"consumer", "billing", "event", "order.paid", "result", "dead_lettered"))
}
