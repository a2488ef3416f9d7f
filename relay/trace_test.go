package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay"
)

// One trace from the request that emits an event, through the relay's send
// span, to the consumer's process span, and on through an event the
// handler emits: each span the child of the one before, with the messaging
// attributes; the follow-up event carries causation and correlation ids.
func TestOneTraceFromRequestThroughRelayToHandler(t *testing.T) {
	t.Parallel()
	// Emit and the relay propagate with the global propagator; only a
	// provider of their own (not the global one) records spans.
	otel.SetTextMapPropagator(propagation.TraceContext{})
	forPaths(t, func(t *testing.T, p *onPath) {
		b := p.emitBundle
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		pubsub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 100, Persistent: true}, watermill.NopLogger{})
		msgs, err := pubsub.Subscribe(ctx, "orders")
		require.NoError(t, err)
		h := testent.NewOutboxHandlers(b.client, consumer.WithTracerProvider(tp))
		handled := make(chan events.Meta, 10)
		h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
			if e.OrderID == 1 {
				if err := tx.Outbox.EmitOrderPaid(ctx, "order-2", testent.OrderPaid{OrderID: 2, AmountCents: 1}); err != nil {
					return err
				}
			}
			handled <- m
			return nil
		})
		go func() {
			for msg := range msgs {
				if err := h.Handle(msg.Context(), "billing", msg); err != nil {
					msg.Nack()
					continue
				}
				msg.Ack()
			}
		}()

		reqCtx, request := tp.Tracer("test").Start(context.Background(), "request")
		require.NoError(t, b.client.WithTx(reqCtx, func(tx *testent.Tx) error {
			return tx.Outbox.EmitOrderPaid(reqCtx, "order-1", testent.OrderPaid{OrderID: 1, AmountCents: 1})
		}))
		request.End()

		runRelay(t, p.config(relay.Config{Publisher: pubsub, TracerProvider: tp}))
		var first, second events.Meta
		for i, m := range []*events.Meta{&first, &second} {
			select {
			case *m = <-handled:
			case <-time.After(patience):
				t.Fatalf("event %d not handled", i+1)
			}
		}
		require.Equal(t, "order-1", first.AggregateID)
		require.Equal(t, first.EventID.String(), second.Headers[events.HeaderCausationID])
		require.Equal(t, first.EventID.String(), second.Headers[events.HeaderCorrelationID])

		var spans tracetest.SpanStubs
		require.Eventually(t, func() bool { spans = exp.GetSpans(); return len(spans) == 5 }, patience,
			10*time.Millisecond, "request, two sends, two processes")
		byName := map[string][]tracetest.SpanStub{}
		for _, s := range spans {
			require.Equal(t, request.SpanContext().TraceID(), s.SpanContext.TraceID(), "span %q is in another trace", s.Name)
			byName[s.Name] = append(byName[s.Name], s)
		}
		require.Len(t, byName["send orders"], 2)
		require.Len(t, byName["process orders"], 2)
		spanOf := func(name, eventID string) tracetest.SpanStub {
			for _, s := range byName[name] {
				if attrs(s)["messaging.message.id"] == eventID {
					return s
				}
			}
			t.Fatalf("no %q span of event %s", name, eventID)
			return tracetest.SpanStub{}
		}
		send1, process1 := spanOf("send orders", first.EventID.String()), spanOf("process orders", first.EventID.String())
		send2, process2 := spanOf("send orders", second.EventID.String()), spanOf("process orders", second.EventID.String())
		require.Equal(t, request.SpanContext().SpanID(), send1.Parent.SpanID(), "send is the request's child")
		require.Equal(t, send1.SpanContext.SpanID(), process1.Parent.SpanID(), "process is the send's child")
		require.Equal(t, process1.SpanContext.SpanID(), send2.Parent.SpanID(), "the follow-up's send is the handler's child")
		require.Equal(t, send2.SpanContext.SpanID(), process2.Parent.SpanID())

		require.Equal(t, trace.SpanKindProducer, send1.SpanKind)
		require.Equal(t, map[string]string{"messaging.system": "watermill", "messaging.destination.name": "orders",
			"messaging.message.id": first.EventID.String(), "messaging.operation.name": "send",
			"messaging.operation.type": "send"}, without(attrs(send1), "messaging.message.body.size"))
		require.Equal(t, trace.SpanKindConsumer, process1.SpanKind)
		require.Equal(t, map[string]string{"messaging.system": "watermill", "messaging.destination.name": "orders",
			"messaging.message.id": first.EventID.String(), "messaging.operation.name": "process",
			"messaging.operation.type": "process", "messaging.consumer.group.name": "billing"},
			without(attrs(process1), "messaging.message.body.size"))
	})
}

func attrs(s tracetest.SpanStub) map[string]string {
	out := map[string]string{}
	for _, kv := range s.Attributes {
		out[string(kv.Key)] = kv.Value.Emit()
	}
	return out
}

func without(m map[string]string, key attribute.Key) map[string]string {
	delete(m, string(key))
	return m
}
