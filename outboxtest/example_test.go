package outboxtest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/events"
	ent "github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/outboxtest"
)

// testBilling tests a handler end to end, as func TestBilling(t *testing.T)
// in a _test.go file of your application: its events go through the outbox,
// the relay and a broker (in memory) to the generated handler, and the test
// checks the handler's effect.
func testBilling(t testing.TB) {
	h := outboxtest.New(t) // a schema of the test's own, dropped when it ends
	client := ent.NewClient(ent.Driver(h.Driver()))
	h.Migrate(client.Schema.Create)

	handlers := ent.NewOutboxHandlers(client)
	handlers.OnOrderPaid("billing", func(ctx context.Context, tx *ent.Tx, e *ent.OrderPaid, m events.Meta) error {
		return tx.Invoice.Create().SetOrderID(e.OrderID).SetAmountCents(e.AmountCents).
			SetCurrency(e.Currency).SetConsumer(m.Consumer).Exec(ctx)
	})
	h.Start(handlers) // the relay and the handlers, until the test ends

	ctx := context.Background()
	err := client.WithTx(ctx, func(tx *ent.Tx) error {
		o, err := tx.Order.Create().SetCustomer("ada").SetAmountCents(4200).Save(ctx)
		if err != nil {
			return err
		}
		return tx.Outbox.EmitOrderPaid(ctx, o.ID,
			ent.OrderPaid{OrderID: o.ID, AmountCents: o.AmountCents})
	})
	if err != nil {
		t.Fatal(err)
	}

	// Waits until each event is handled; fails the test with the reason
	// of any that went to the dead letters, or where each one stands.
	for _, o := range h.RequireHandled() {
		fmt.Printf("%s handled by %s\n", o.Event, o.Consumer)
	}
	inv := client.Invoice.Query().OnlyX(ctx)
	fmt.Printf("invoice: %d cents %s\n", inv.AmountCents, inv.Currency)
}

func Example() {
	runTest("billing", testBilling)
	// Output:
	// order.paid handled by billing
	// invoice: 4200 cents EUR
}

// placeOrder is the code under test: it places an order and schedules its
// payment reminder for a day later.
func placeOrder(ctx context.Context, tx *ent.Tx, amount int64) (*ent.Order, uuid.UUID, error) {
	var reminder uuid.UUID
	o, err := tx.Order.Create().SetCustomer("ada").SetAmountCents(amount).Save(ctx)
	if err != nil {
		return nil, reminder, err
	}
	err = tx.Outbox.EmitPaymentReminder(ctx, o.ID, ent.PaymentReminder{OrderID: o.ID},
		events.DeliverAfter(24*time.Hour), events.ReturnEventID(&reminder))
	return o, reminder, err
}

// testReminder asserts what a transaction scheduled and for when, as func
// TestReminder(t *testing.T) would: the database's clock decides when the
// reminder is due, so the time is checked give or take a minute.
func testReminder(t testing.TB) {
	h := outboxtest.New(t)
	client := ent.NewClient(ent.Driver(h.Driver()))
	h.Migrate(client.Schema.Create)

	ctx := context.Background()
	tx, err := client.Tx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	o, reminder, err := placeOrder(ctx, tx, 4200)
	if err != nil {
		t.Fatal(err)
	}
	r := outboxtest.RequireScheduled[ent.PaymentReminder](t, tx.Outbox.ScheduledX(ctx), time.Now().Add(24*time.Hour), time.Minute)
	fmt.Printf("reminder for order %d scheduled\n", r.OrderID)

	// Paid before the day is out: the reminder is cancelled.
	res, err := tx.Outbox.Cancel(ctx, reminder)
	if err != nil {
		t.Fatal(err)
	}
	outboxtest.RequireNotScheduled[ent.PaymentReminder](t, tx.Outbox.ScheduledX(ctx))
	fmt.Printf("order %d paid: reminder %s\n", o.ID, res)
}

func ExampleRequireScheduled() {
	runTest("reminder", testReminder)
	// Output:
	// reminder for order 1 scheduled
	// order 1 paid: reminder cancelled
}
