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
//
// What users call is the options (WithMaxAttempts, ...), Config,
// DeadLetter, PanicError, ErrDuplicate, the Meta* names and
// CleanupProcessed. Everything in generated.go, each doc starting "For
// generated code.", is called by the generated handlers only: it is
// exported because generated code lives in the user's module, and may
// change with the generator.
//
// WithMetrics counts each delivery by result (handled, duplicate, retried,
// dead_lettered), times the handler and observes the event's age (see the
// metrics package). Each delivery runs in an OpenTelemetry consumer span,
// "process <topic>", the child of the relay's send span the message
// carries (WithTracerProvider; the global provider by default, which
// records nothing until the application sets one). The handler's ctx
// carries the event (events.WithCause): events it emits get causation_id
// and correlation_id headers.
//
// A handler set logs through slog.Default() unless given WithLogger
// (watermill.NopLogger{} silences it): each retry at info, each dead
// letter once it is stored at error (DeadLetteredLog, with the event id,
// consumer, topic and the reason).
//
// Errors this package returns start with "consumer: ". What a handler
// returns, a decoding failure or a panic (PanicError) is the reason a
// dead letter is stored with, kept as it is.
package consumer
