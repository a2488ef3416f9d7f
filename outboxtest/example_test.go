package outboxtest_test

import (
	"context"
	"fmt"
	"testing"

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
