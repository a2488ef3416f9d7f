package admin_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/admin"
	"github.com/entoutbox/entoutbox/consumer"
	outboxrow "github.com/entoutbox/entoutbox/ent/outbox"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
)

// emitScheduled emits an order.paid due a second ago: Emit writes it to
// the scheduled events, and it reaches the outbox when promoted.
func (e *env) emitScheduled(t *testing.T, aggregate string, p testent.OrderPaid) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	var id uuid.UUID
	require.NoError(t, e.client.WithTx(ctx, func(tx *testent.Tx) error {
		return tx.Outbox.EmitOrderPaid(ctx, aggregate, p, events.DeliverAt(time.Now().Add(-time.Second)),
			events.ReturnEventID(&id))
	}))
	return id
}

// promoted waits until the relay's promotion moved event id, due, to the
// outbox, with its due time in the headers.
func (e *env) promoted(t *testing.T, id uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	require.Eventually(t, func() bool {
		return e.ent.Outbox.Query().Where(outboxrow.EventID(id)).ExistX(ctx)
	}, patience, 20*time.Millisecond, "the scheduled event reaches the outbox")
	row := e.ent.Outbox.Query().Where(outboxrow.EventID(id)).OnlyX(ctx)
	require.Contains(t, row.Headers, events.MetaDeliverAt, "promoted, not emitted for now")
}

// A scheduled event the relay gave up on, once due and moved to the
// outbox, is retried like any: it goes out again with its original id and
// its due time, once.
func TestRetryRelayDeadLetterOfAScheduledEvent(t *testing.T) {
	t.Parallel()
	e := setup(t, true)
	ctx := context.Background()
	ids := e.recordIDs(t, "billing")
	broken := e.failingRelay(t)

	id := e.emitScheduled(t, "7", testent.OrderPaid{OrderID: 7, AmountCents: 700})
	d := e.letter(t, "relay") // once promoted, its publish failed
	require.Equal(t, id, d.EventID)
	var headers map[string]string
	require.NoError(t, json.Unmarshal(d.Headers, &headers))
	require.Contains(t, headers, events.MetaDeliverAt, "the letter keeps the due time")

	broken.Store(false)
	e.retryRelayLetter(t, d, id, ids)
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, []uuid.UUID{id}, ids.get(), "delivered once, with its original id")
	row := e.ent.Outbox.Query().OnlyX(ctx)
	require.Equal(t, headers[events.MetaDeliverAt], row.Headers[events.MetaDeliverAt], "and its due time")
}

// A scheduled event delivered once it was due replays like any delivered
// event: a fresh consumer gets it with its original id.
func TestReplayOfAScheduledEvent(t *testing.T) {
	t.Parallel()
	e := setup(t, true)
	ctx := context.Background()
	var billing atomic.Int64
	h := testent.NewOutboxHandlers(e.client, consumer.WithTopicPrefix(e.prefix))
	h.OnOrderPaid("billing", func(context.Context, *testent.Tx, *testent.OrderPaid, events.Meta) error {
		billing.Add(1)
		return nil
	})
	e.consume(t, h)
	e.relay(t, e.broker.Publisher())

	id := e.emitScheduled(t, "3", testent.OrderPaid{OrderID: 3, AmountCents: 300})
	e.promoted(t, id)
	e.deliveredOnce(t, id)
	require.Eventually(t, func() bool { return billing.Load() == 1 }, patience, 10*time.Millisecond)

	got := e.recordIDs(t, "read-model")
	n, err := e.admin.Replay(ctx, e.broker.Publisher(), admin.Range{Events: []string{"order.paid"},
		Since: time.Now().Add(-time.Hour)}, admin.ReplayOptions{TopicPrefix: e.prefix})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Eventually(t, func() bool { return len(got.get()) == 1 }, patience, 10*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, []uuid.UUID{id}, got.get(), "the replay reaches the fresh consumer, with the original id")
	require.Equal(t, int64(1), billing.Load(), "the consumer that handled it skips it")
	require.Empty(t, e.ent.DeadLetter.Query().AllX(ctx), "no consumer refused it")
}

// A scheduled event a consumer gave up on, once due and delivered, is
// retried like any: the consumer handles it once, with its original id.
func TestRetryConsumerDeadLetterOfAScheduledEvent(t *testing.T) {
	t.Parallel()
	e := setup(t, true)
	ctx := context.Background()
	var calls atomic.Int64
	var broken atomic.Bool
	broken.Store(true)
	h := testent.NewOutboxHandlers(e.client, consumer.WithTopicPrefix(e.prefix), consumer.WithMaxAttempts(2),
		consumer.WithBackoff(5*time.Millisecond, 10*time.Millisecond))
	h.OnOrderPaid("billing", invoiceHandler(&calls, &broken))
	e.consume(t, h)
	e.relay(t, e.broker.Publisher())

	id := e.emitScheduled(t, "5", testent.OrderPaid{OrderID: 5, AmountCents: 500})
	e.promoted(t, id)
	d := e.letter(t, "billing")
	require.Equal(t, id, d.EventID)
	e.deliveredOnce(t, id)

	broken.Store(false)
	rs, err := e.admin.Retry(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, []admin.Result{{Letter: d.ID, EventID: id, Source: "billing", Outcome: admin.Requeued}}, rs)
	require.Eventually(t, func() bool { return e.invoices("billing") == 1 }, patience, 10*time.Millisecond)
	e.deliveredOnce(t, id)
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, 1, e.invoices("billing"), "handled once")
	row := e.ent.Outbox.Query().OnlyX(ctx)
	require.Contains(t, row.Headers, events.MetaDeliverAt, "the requeued row keeps its due time")
}
