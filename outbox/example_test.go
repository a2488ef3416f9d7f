package outbox_test

import (
	"context"
	"fmt"
	"log"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
)

// The generated tx.Outbox.Emit<Event> writes the event in the transaction
// of the business change: the order and its event commit together. The
// event is an outbox row that the relay publishes.
func Example_emit() {
	ctx := context.Background()
	client, done := exampleClient("outbox_emit")
	defer done()

	tx, err := client.Tx(ctx)
	if err != nil {
		log.Fatal(err)
	}
	order := tx.Order.Create().SetID(42).SetCustomer("ada").SetAmountCents(1999).SaveX(ctx)
	err = tx.Outbox.EmitOrderPaid(ctx, fmt.Sprint(order.ID), testent.OrderPaid{OrderID: order.ID, AmountCents: order.AmountCents})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	row := client.Outbox.Query().OnlyX(ctx)
	fmt.Println("topic:", row.Topic)
	fmt.Println("event:", row.EventName, "version", row.EventVersion)
	fmt.Println("aggregate:", row.AggregateType, row.AggregateID)
	fmt.Println("payload:", string(row.Payload)) // the declared default filled in the currency
	fmt.Println("delivered:", row.DeliveredAt != nil)
	// Output:
	// topic: orders
	// event: order.paid version 2
	// aggregate: Order 42
	// payload: {"currency": "EUR", "order_id": 42, "amount_cents": 1999}
	// delivered: false
}

// An event emitted in a transaction that rolls back is gone with it: it is
// never written, so never published.
func Example_rollback() {
	ctx := context.Background()
	client, done := exampleClient("outbox_rollback")
	defer done()

	tx, err := client.Tx(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Outbox.EmitOrderPaid(ctx, "42", testent.OrderPaid{OrderID: 42, AmountCents: 1999}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		log.Fatal(err)
	}

	fmt.Println("outbox rows:", client.Outbox.Query().CountX(ctx))
	// Output:
	// outbox rows: 0
}

// Emit refuses a payload that breaks its declaration before anything
// reaches the database, naming the event and the field; the transaction
// stays usable.
func Example_invalid() {
	ctx := context.Background()
	client, done := exampleClient("outbox_invalid")
	defer done()

	tx, err := client.Tx(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	err = tx.Outbox.EmitOrderPaid(ctx, "42", testent.OrderPaid{OrderID: 42, AmountCents: -5})
	fmt.Println(err)
	err = tx.Outbox.EmitOrderPaid(ctx, "42", testent.OrderPaid{OrderID: 42, AmountCents: 1999, Currency: "JPY"})
	fmt.Println(err)
	// Output:
	// events: invalid "order.paid" v2 payload: field "amount_cents" value -5 is not positive
	// events: invalid "order.paid" v2 payload: field "currency" value "JPY" is not one of [EUR USD]
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
