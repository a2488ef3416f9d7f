package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/promtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/metrics"
	"github.com/entoutbox/entoutbox/outbox"
	"github.com/entoutbox/entoutbox/outboxtest"
)

// After real deliveries the metrics count each result per consumer and
// event: handled, a duplicate, the retries of a handler that fails twice,
// and the dead letters of one that always fails and of an event no
// declaration names; the handler's tries are timed and the handled
// events' age is observed.
func TestConsumerMetricsAfterDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithMaxAttempts(3), consumer.WithMetrics(m))...)
	var calls atomic.Int64
	h.OnOrderPaid("billing", invoiceHandler(&calls))
	var tries atomic.Int64
	h.OnOrderPaid("shipping", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		if tries.Add(1) <= 2 {
			return errors.New("not yet")
		}
		return nil
	})
	h.OnOrderPaid("audit", func(context.Context, *testent.Tx, *testent.OrderPaid, events.Meta) error {
		return errors.New("never")
	})

	msg := outboxtest.Message(t, testent.OrderPaid{OrderID: 1, AmountCents: 100}, "1")
	for _, c := range []string{"billing", "billing", "shipping", "audit"} {
		require.NoError(t, h.Handle(ctx, c, msg.Copy()))
	}
	unknown := outboxtest.Message(t, testent.OrderPaid{OrderID: 2, AmountCents: 100}, "2")
	unknown.Metadata.Set(events.MetaEventName, "order.refunded")
	require.NoError(t, h.Handle(ctx, "billing", unknown))
	garbled := outboxtest.Message(t, testent.OrderPaid{OrderID: 3, AmountCents: 100}, "3")
	garbled.Payload = []byte("{not json")
	require.NoError(t, h.Handle(ctx, "billing", garbled))

	v := func(name string, labels ...string) float64 { return promtest.Value(t, reg, name, labels...) }
	const total = "entoutbox_consumer_deliveries_total"
	paid := func(c, result string) float64 {
		return v(total, "consumer", c, "event", "order.paid", "result", result)
	}
	require.Equal(t, 1.0, paid("billing", "handled"))
	require.Equal(t, 1.0, paid("billing", "duplicate"))
	require.Equal(t, 2.0, paid("shipping", "retried"))
	require.Equal(t, 1.0, paid("shipping", "handled"))
	require.Equal(t, 2.0, paid("audit", "retried"))
	require.Equal(t, 1.0, paid("audit", "dead_lettered"))
	require.Equal(t, 0.0, paid("audit", "handled"))
	require.Equal(t, 1.0, v(total, "consumer", "billing", "event", "unknown", "result", "dead_lettered"),
		"an undeclared event name is not a label")
	require.Equal(t, 1.0, paid("billing", "dead_lettered"), "the garbled payload")

	// The dead letters again, by why.
	const lettered = "entoutbox_consumer_dead_lettered_total"
	require.Equal(t, 1.0, v(lettered, "consumer", "audit", "reason", "max_attempts"))
	require.Equal(t, 1.0, v(lettered, "consumer", "billing", "reason", "unknown_event"))
	require.Equal(t, 1.0, v(lettered, "consumer", "billing", "reason", "malformed"))
	require.Equal(t, 0.0, v(lettered, "consumer", "billing", "reason", "max_attempts"))

	const duration = "entoutbox_consumer_handler_duration_seconds"
	require.Equal(t, 2.0, v(duration, "consumer", "billing", "event", "order.paid"), "the handled try and the duplicate's")
	require.Equal(t, 3.0, v(duration, "consumer", "shipping", "event", "order.paid"))
	require.Equal(t, 3.0, v(duration, "consumer", "audit", "event", "order.paid"))
	const age = "entoutbox_consumer_event_age_seconds"
	require.Equal(t, 1.0, v(age, "consumer", "billing", "event", "order.paid"))
	require.Equal(t, 1.0, v(age, "consumer", "shipping", "event", "order.paid"))
	require.Equal(t, 0.0, v(age, "consumer", "audit", "event", "order.paid"))
}

// An event emitted in a handler's transaction carries the handled event's
// id as causation_id and its correlation_id (else its id); headers given
// to Emit win.
func TestEventsEmittedInAHandlerCarryCausationAndCorrelation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	h := testent.NewOutboxHandlers(b.client, fast()...)
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		if err := tx.Outbox.EmitOrderPaid(ctx, "next", testent.OrderPaid{OrderID: e.OrderID + 100, AmountCents: 1}); err != nil {
			return err
		}
		return tx.Outbox.EmitOrderPaid(ctx, "mine", testent.OrderPaid{OrderID: e.OrderID + 200, AmountCents: 1},
			events.WithHeader(events.HeaderCausationID, "set-by-caller"))
	})
	first := outboxtest.Message(t, testent.OrderPaid{OrderID: 1, AmountCents: 1}, "1")
	second := outboxtest.Message(t, testent.OrderPaid{OrderID: 2, AmountCents: 1}, "2",
		events.WithHeader(events.HeaderCorrelationID, "request-42"))
	require.NoError(t, h.Handle(ctx, "billing", first))
	require.NoError(t, h.Handle(ctx, "billing", second))

	headers := map[int64]map[string]string{}
	for _, row := range b.client.Outbox.Query().AllX(ctx) {
		var p testent.OrderPaid
		require.NoError(t, json.Unmarshal(row.Payload, &p))
		headers[p.OrderID] = row.Headers
	}
	require.Equal(t, map[string]string{"causation_id": first.UUID, "correlation_id": first.UUID}, headers[101])
	require.Equal(t, map[string]string{"causation_id": "set-by-caller", "correlation_id": first.UUID}, headers[201])
	require.Equal(t, map[string]string{"causation_id": second.UUID, "correlation_id": "request-42"}, headers[102])

	// Outside a handler nothing is added.
	require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
		return tx.Outbox.EmitOrderPaid(ctx, "plain", testent.OrderPaid{OrderID: 9, AmountCents: 1})
	}))
	for _, row := range b.client.Outbox.Query().AllX(ctx) {
		if row.AggregateID == "plain" {
			require.Empty(t, row.Headers)
		}
	}
}

// Emit counts an event only once its transaction committed: not when it
// rolls back, even after a flush wrote it. Not parallel: SetMetrics is
// process-wide.
func TestEmitCountsCommittedEvents(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	outbox.SetMetrics(m)
	t.Cleanup(func() { outbox.SetMetrics(nil) })

	emit := func(n int, rollback bool) error {
		return b.client.WithTx(ctx, func(tx *testent.Tx) error {
			for i := range n {
				if err := tx.Outbox.EmitOrderPaid(ctx, "a", testent.OrderPaid{OrderID: int64(i), AmountCents: 1}); err != nil {
					return err
				}
			}
			// One with its own id, written at once.
			if err := tx.Outbox.EmitOrderPaid(ctx, "a", testent.OrderPaid{OrderID: 99, AmountCents: 1},
				events.WithEventID(uuid.New())); err != nil {
				return err
			}
			if err := tx.Outbox.Flush(ctx); err != nil {
				return err
			}
			if rollback {
				return errors.New("rolled back on purpose")
			}
			return nil
		})
	}
	require.NoError(t, emit(3, false))
	require.Error(t, emit(5, true))
	require.Equal(t, 4.0, promtest.Value(t, reg, "entoutbox_emit_events_total", "event", "order.paid"))
}

// An event that comes before its aggregate's previous one counts one wait;
// a message the broker delivered before counts a redelivery; every event
// applied counts in the events per transaction.
func TestGapWaitsRedeliveriesAndTransactionsAreCounted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithMetrics(m))...)
	var calls atomic.Int64
	h.OnOrderPaid("billing", seqHandler(&calls, nil))

	second := make(chan error, 1)
	go func() { second <- h.Handle(ctx, "billing", seqMessage(t, 1, 2)) }()
	require.Eventually(t, func() bool {
		return promtest.Value(t, reg, "entoutbox_consumer_gap_waits_total", "consumer", "billing") == 1
	}, patience, time.Millisecond, "seq 2 waits for seq 1")
	require.NoError(t, h.Handle(ctx, "billing", seqMessage(t, 1, 1)))
	require.NoError(t, <-second)
	require.Equal(t, []int64{1, 2}, b.applied(t, "billing", 1))
	require.Equal(t, 1.0, promtest.Value(t, reg, "entoutbox_consumer_gap_waits_total", "consumer", "billing"))

	again := seqMessage(t, 1, 2)
	again.Metadata.Set(events.MetaDeliveryCount, "2") // as the broker says of a message it delivered before
	require.NoError(t, h.Handle(ctx, "billing", again), "a duplicate")
	require.Equal(t, 1.0, promtest.Value(t, reg, "entoutbox_consumer_redeliveries_total", "consumer", "billing"),
		"the broker's second delivery; the first deliveries (no count, or 1) are not redeliveries")
	sum := promtest.Sum(t, reg, "entoutbox_consumer_batch_events")
	require.Equal(t, 2.0, sum, "two events applied, in one transaction each or together")
}
