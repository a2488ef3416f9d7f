// Package entoutbox is the transactional outbox for Go services built on
// ent and PostgreSQL. You declare versioned events in Go and run go
// generate. Your code then emits events with typed methods that write the
// event row in the same transaction as the business change. A relay
// publishes committed rows to any Watermill broker at least once, and
// generated handlers dedupe by event id, so each consumer's effect happens
// once.
//
// This root package holds no API: it carries the go:generate lines that
// regenerate ent/, the tests' ent package and every example. The packages
// below are what you use.
//
// # Quick start
//
// 1. Declare events, in any package. Wire names are never derived from Go
// types:
//
//	type OrderPaid struct{ events.Schema }
//
//	func (OrderPaid) Name() string      { return "order.paid" } // stable wire name
//	func (OrderPaid) Topic() string     { return "orders" }     // destination topic
//	func (OrderPaid) Aggregate() string { return "Order" }      // ordering key type
//	func (OrderPaid) Versions() []events.Version {
//		return []events.Version{
//			events.V(1, field.Int64("order_id"), field.Int64("amount_cents")),
//		}
//	}
//
// 2. Add the outbox tables to your ent schema by embedding ours:
//
//	type Outbox struct{ schema.Outbox }
//	type ProcessedEvent struct{ schema.ProcessedEvent }
//	type DeadLetter struct{ schema.DeadLetter }
//	type AggregateSequence struct{ schema.AggregateSequence }
//	type ConsumerPosition struct{ schema.ConsumerPosition }
//	type ScheduledEvent struct{ schema.ScheduledEvent }
//
// 3. Register the extension in ent/entc.go, a program with the ignore
// build tag, run from a go:generate line in your ent package:
//
//	ext := codegen.NewExtension(codegen.Events(orderevents.OrderPaid{}))
//	err := entc.Generate("./schema", &gen.Config{}, entc.Extensions(ext))
//
// 4. Run go generate ./... and emit in a transaction. If the transaction
// rolls back, so does the event:
//
//	err := client.WithTx(ctx, func(tx *ent.Tx) error {
//		o, err := tx.Order.Create().SetCustomer("ada").SetAmountCents(4200).Save(ctx)
//		if err != nil {
//			return err
//		}
//		return tx.Outbox.EmitOrderPaid(ctx, o.ID,
//			ent.OrderPaid{OrderID: o.ID, AmountCents: o.AmountCents})
//	})
//
// 5. Open a broker by URL. Consume with the generated handlers, each
// delivery in one transaction with its dedupe record, and run the relay
// (or the entoutbox relay command):
//
//	b, err := broker.Open(ctx, "nats://127.0.0.1:4222", broker.Options{})
//	...
//	h := ent.NewOutboxHandlers(client)
//	h.OnOrderPaid("billing", func(ctx context.Context, tx *ent.Tx, e *ent.OrderPaid, m events.Meta) error {
//		return tx.Invoice.Create().SetOrderID(e.OrderID).SetAmountCents(e.AmountCents).Exec(ctx)
//	})
//	err = h.AddToRouter(router, b.Subscriber) // a Watermill router
//	...
//	r, err := relay.New(relay.Config{DB: db, Publisher: b.Publisher()})
//	...
//	go r.Run(ctx)
//
// The relay's topic prefix (relay.Config.TopicPrefix) and the consumers'
// (consumer.WithTopicPrefix) must match. docs/getting-started.md goes from
// an empty folder to a first handled event. README.md is the guide: field
// kinds, options, what Emit and the handlers guarantee; docs/operations.md
// runs it (the relay's flags, status, dead letters, metrics) and
// docs/reference.md holds every setting and rule. examples/orders runs the
// whole path.
//
// # Packages
//
// They are listed in the order an event travels them. docs/architecture.md
// draws that path, says which package and table owns each step, and names
// the mechanism behind each delivery guarantee.
//
//   - [github.com/entoutbox/entoutbox/events] and its field package:
//     declare events; emit options and errors.
//   - [github.com/entoutbox/entoutbox/codegen]: generate; the entc
//     extension. Only entc.go programs import it.
//   - [github.com/entoutbox/entoutbox/outbox]: write; what generated Emit
//     needs (the per-transaction batch, its INSERT and NOTIFY).
//   - [github.com/entoutbox/entoutbox/relay]: relay committed rows to a
//     broker (fast path by default, compatible path on request).
//   - [github.com/entoutbox/entoutbox/broker]: Watermill Pub/Subs chosen by
//     URL.
//   - [github.com/entoutbox/entoutbox/consumer]: the run time of generated
//     handlers (dedupe, retries, dead letters, retention).
//   - [github.com/entoutbox/entoutbox/schema]: the ent schemas to embed.
//   - [github.com/entoutbox/entoutbox/outboxtest]: test helpers.
//   - cmd/entoutbox: the command (relay, status, cleanup).
package entoutbox
