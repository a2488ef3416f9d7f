package outboxtest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/entoutbox/entoutbox/events"
	ent "github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/internal/testent/enttest"
	"github.com/entoutbox/entoutbox/outboxtest"
)

// testBillingOnSQLite is a whole test of a handler, end to end, as func
// TestBilling(t *testing.T) in your application, on a SQLite file of the
// test's own: no server to run, and it takes a fraction of a second.
func testBillingOnSQLite(t testing.TB) {
	h := outboxtest.New(t, outboxtest.OnSQLite()) // a file in t.TempDir()
	// ent's enttest migrates the client's schema on the harness's database.
	client := enttest.NewClient(t, enttest.WithOptions(ent.Driver(h.Driver())))

	handlers := ent.NewOutboxHandlers(client)
	handlers.OnOrderPaid("billing", func(ctx context.Context, tx *ent.Tx, e *ent.OrderPaid, m events.Meta) error {
		return tx.Invoice.Create().SetOrderID(e.OrderID).SetAmountCents(e.AmountCents).
			SetCurrency(e.Currency).SetConsumer(m.Consumer).Exec(ctx)
	})
	h.Start(handlers) // the relay (on SQLite, one at a time) and the handlers

	ctx := context.Background()
	err := client.WithTx(ctx, func(tx *ent.Tx) error {
		o, err := tx.Order.Create().SetCustomer("ada").SetAmountCents(4200).Save(ctx)
		if err != nil {
			return err
		}
		return tx.Outbox.EmitOrderPaid(ctx, o.ID, ent.OrderPaid{OrderID: o.ID, AmountCents: o.AmountCents})
	})
	if err != nil {
		t.Fatal(err)
	}

	for _, o := range h.RequireHandled() {
		fmt.Printf("%s handled by %s\n", o.Event, o.Consumer)
	}
	inv := client.Invoice.Query().OnlyX(ctx)
	fmt.Printf("invoice: %d cents %s\n", inv.AmountCents, inv.Currency)
}

func ExampleOnSQLite() {
	runTest("billing on SQLite", testBillingOnSQLite)
	// Output:
	// order.paid handled by billing
	// invoice: 4200 cents EUR
}
