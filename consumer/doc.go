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
// DeadLetter, PanicError, ErrDuplicate, OutOfOrderError, HeldError,
// ErrUnknownTenant, TenantError, the Meta* names and CleanupProcessed.
// Everything whose doc starts "For
// generated code." is called by the generated handlers only: it is
// exported because generated code lives in the user's module, and may
// change with the generator.
//
// The files: set.go is the handler set and how a handler runs alone;
// handle.go one delivery (decode, tries, dead letters); wait.go the wait
// for an aggregate's previous event, turns.go and wake.go its wake-ups,
// slots.go what a waiting event takes from the others; tenants.go the
// handler sets of a database per tenant (ent.NewTenantOutboxHandlers:
// each event applied in its tenant's database); router.go the
// subscriptions; deadletter.go and message.go what their names say;
// generated.go the helpers the generated code calls. Its own packages, in internal/: ordering is the rule of
// order (apply, duplicate, wait, held), batching the transactions events
// share and the runs they apply, payload the decoding and schema checks
// of payloads, letters the writing of dead letters; the statements
// they run are internal/outboxdb's, under golden files.
//
// # Order
//
// For each consumer name, the effects of one aggregate are applied in the
// order its events were written, with any number of instances and many
// messages in flight in each (a NATS subscriber's max_in_flight, 128; on
// other brokers AddToRouter subscribes WithConcurrency members of the
// consumer's group per topic, 8), sharing transactions (WithBatchSize). Emit numbers each
// aggregate's events on a topic (events.MetaAggregateSeq); the handler's
// transaction locks the consumer's position on the aggregate
// (schema.ConsumerPosition) and applies an event only when it is the next
// one (internal/ordering). One at or below the position is a duplicate. One
// further ahead waits for its predecessor, which another instance is
// handling or the broker delivers again after a kill: in the handler set,
// until the predecessor is applied, here or in another instance (a
// notification wakes it: wake.go), looking at the position between pauses
// of 5 to 200 ms, and nacked once its aggregate has not moved for
// WithGapWait (5 s) (wait.go). A gap the aggregate has waited on for WithMaxGap
// (5 min) is an event that never comes: the waiting event goes to the dead
// letters and the aggregate is held at the missing one. An aggregate of
// which the consumer has applied nothing starts at its lowest waiting
// event after WithStartAfter (2 min), logged at info: its first events
// were never delivered to this consumer.
//
// A dead letter holds its aggregate: by default, when an event goes to the
// dead letters (its attempts used up, a payload that does not decode, a
// version too new...), the aggregate's later events go there too, at once
// and without a try, with a reason starting "held:" that names it (a
// *HeldError), until the held event is retried (`entoutbox dead-letters
// retry`) and applied, or its letter discarded: a discarded event is
// skipped, the position moving past it, and the aggregate is then held at
// its next event when that one is in the dead letters too, and goes on
// otherwise. WithPassOverDeadLetters
// moves the position past it instead: the aggregate goes on, and the
// letter, once retried, is applied then, out of order. Either way the
// dead letter keeps the event's aggregate_seq.
//
// Without positions in the schema, or for events without a seq (a
// producer without schema.AggregateSequence), the handler set applies what
// comes as it comes, one message at a time per consumer name and topic
// without positions, and says so at error level.
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
