package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/outbox"
)

// A typed handler, registered with the generated On<Event>, writes its
// effect in the transaction that records the event as processed for its
// consumer name: a broker that delivers the event twice (at-least-once)
// gets one effect. h.AddToRouter runs h.Handle for every delivery of a
// Watermill router; here the deliveries are made by hand.
func Example_handlers() {
	ctx := context.Background()
	client, done := exampleClient("consumer_handlers")
	defer done()

	h := testent.NewOutboxHandlers(client)
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		fmt.Printf("billing order %d: %d %s\n", e.OrderID, e.AmountCents, e.Currency)
		return tx.Invoice.Create().SetOrderID(e.OrderID).SetAmountCents(e.AmountCents).
			SetCurrency(e.Currency).SetConsumer(m.Consumer).Exec(ctx)
	})

	msg := exampleMessage(testent.OrderPaid{OrderID: 42, AmountCents: 1999, Currency: "EUR"}, "42")
	for range 2 { // the same event, delivered twice
		if err := h.Handle(ctx, "billing", msg.Copy()); err != nil {
			log.Fatal(err)
		}
	}

	fmt.Println("invoices:", client.Invoice.Query().CountX(ctx))
	// Output:
	// billing order 42: 1999 EUR
	// invoices: 1
}

// The examples need the test server; without it they are left out of the
// run (unless CI=true) rather than fail on their output.
func init() { pgtest.SkipExamplesUnlessReachable() }

// exampleClient returns an ent client on a migrated schema of its own, and
// the function that drops it.
func exampleClient(name string) (*testent.Client, func()) {
	ctx := context.Background()
	db, err := pgtest.Open(ctx, name)
	if err != nil {
		log.Fatal(err)
	}
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	if err := client.Schema.Create(ctx); err != nil {
		_ = db.Drop()
		log.Fatal(err)
	}
	return client, func() {
		if err := db.Drop(); err != nil {
			log.Print(err)
		}
	}
}

// exampleMessage is the message the relay publishes for payload about
// aggregateID.
func exampleMessage(payload events.Payload, aggregateID string) *message.Message {
	name, version := payload.OutboxEvent()
	b, err := json.Marshal(payload)
	if err != nil {
		log.Fatal(err)
	}
	msg, err := outbox.NewMessage(outbox.Event{Name: name, Version: version, AggregateID: aggregateID, Payload: b},
		events.NewEmitConfig())
	if err != nil {
		log.Fatal(err)
	}
	msg.Metadata.Set(events.MetaCreatedAt, time.Now().UTC().Format(time.RFC3339Nano))
	return msg
}
