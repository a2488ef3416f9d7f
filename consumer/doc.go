// Package consumer is the run-time side of the generated, typed handlers:
// each delivery runs in one transaction that first records (consumer,
// event id) in the processed-events table, so an event's effect happens
// once per consumer name over at-least-once delivery. Older versions are
// upcast by the generated decoders; retries back off exponentially up to a
// bound; what cannot be handled goes to the dead letters with its reason.
//
// Users meet it through the generated code:
//
//	h := ent.NewOutboxHandlers(client, consumer.WithMaxAttempts(5))
//	h.OnOrderPaid("billing", func(ctx context.Context, tx *ent.Tx, e *ent.OrderPaid, m events.Meta) error {
//		return tx.Invoice.Create().SetOrderID(e.OrderID).Exec(ctx)
//	})
//	b, err := broker.Open(ctx, "nats://127.0.0.1:4222", broker.Options{})
//	...
//	err = h.AddToRouter(router, b.Subscriber) // a subscriber per consumer name
package consumer
