package relay_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/outboxtest"
	"github.com/entoutbox/entoutbox/relay"
)

// TestNestedPayloadEndToEnd emits an event with line items, an address and
// a map of objects in a real transaction, relays it and handles it with
// the generated handler: nested defaults are applied at Emit, a version 1
// payload reaches the handler with version 2's nested defaults, and a bad
// nested field is refused at Emit with its path, the transaction still
// usable.
func TestNestedPayloadEndToEnd(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()

	// Refused before anything reaches the database, naming the path.
	err := b.client.WithTx(ctx, func(tx *testent.Tx) error {
		bad := []struct {
			payload testent.OrderPlaced
			field   string
			err     string
		}{
			{testent.OrderPlaced{OrderID: 1, Address: testent.OrderPlacedAddress{Street: "1 rue", City: "Lyon"},
				Lines: []testent.OrderPlacedLine{{Sku: "a", Qty: 1}, {Sku: "b", Qty: 1}, {Qty: 2}}},
				"lines[2].sku", `events: invalid "order.placed" v2 payload: field "lines[2].sku" is required`},
			{testent.OrderPlaced{OrderID: 1, Lines: []testent.OrderPlacedLine{{Sku: "a", Qty: 1}},
				Address: testent.OrderPlacedAddress{Street: "1 rue"}},
				"address.city", `events: invalid "order.placed" v2 payload: field "address.city" is required`},
			{testent.OrderPlaced{OrderID: 1, Lines: []testent.OrderPlacedLine{{Sku: "a", Qty: 1, Unit: "box"}},
				Address: testent.OrderPlacedAddress{Street: "1 rue", City: "Lyon"}},
				"lines[0].unit", `events: invalid "order.placed" v2 payload: field "lines[0].unit" value "box" is not one of [piece kg]`},
			{testent.OrderPlaced{OrderID: 1, Lines: []testent.OrderPlacedLine{{Sku: "a", Qty: 1}},
				Address:    testent.OrderPlacedAddress{Street: "1 rue", City: "Lyon"},
				Attributes: map[string]testent.OrderPlacedAttribute{"gift": {Value: "yes"}, "note": {Value: "far too long for sixteen"}}},
				`attributes["note"].value`, `events: invalid "order.placed" v2 payload: field "attributes[\"note\"].value" is 24 characters long, more than the maximum 16`},
		}
		for _, c := range bad {
			err := tx.Outbox.EmitOrderPlaced(ctx, "1", c.payload)
			var ve *events.ValidationError
			require.ErrorAs(t, err, &ve)
			require.Equal(t, c.field, ve.Field)
			require.EqualError(t, err, c.err)
		}
		return errors.New("roll back")
	})
	require.EqualError(t, err, "roll back")

	err = b.client.WithTx(ctx, func(tx *testent.Tx) error {
		o, err := tx.Order.Create().SetCustomer("ada").SetAmountCents(4200).Save(ctx)
		if err != nil {
			return err
		}
		bad := testent.OrderPlaced{OrderID: o.ID, Lines: []testent.OrderPlacedLine{{Sku: "x"}}, Address: testent.OrderPlacedAddress{Street: "s", City: "c"}}
		require.EqualError(t, tx.Outbox.EmitOrderPlaced(ctx, "ada", bad),
			`events: invalid "order.placed" v2 payload: field "lines[0].qty" value 0 is below the minimum 1`)
		// The transaction is still usable after the refusal.
		return tx.Outbox.EmitOrderPlaced(ctx, "ada", testent.OrderPlaced{
			OrderID:    o.ID,
			Lines:      []testent.OrderPlacedLine{{Sku: "tea", Qty: 2}, {Sku: "rice", Qty: 1, Unit: "kg", Pack: 4}},
			Address:    testent.OrderPlacedAddress{Street: "1 rue de la Paix", City: "Paris"},
			Attributes: map[string]testent.OrderPlacedAttribute{"gift": {Value: "wrap"}},
		})
	})
	require.NoError(t, err)
	rows := b.rows(t)
	require.Len(t, rows, 1, "only the valid event was written")
	require.Equal(t, map[string]any{
		"order_id": float64(1),
		"lines": []any{
			map[string]any{"sku": "tea", "qty": float64(2), "unit": "piece", "pack": float64(0)},
			map[string]any{"sku": "rice", "qty": float64(1), "unit": "kg", "pack": float64(4)},
		},
		"address":    map[string]any{"street": "1 rue de la Paix", "city": "Paris", "country": "FR"},
		"attributes": map[string]any{"gift": map[string]any{"value": "wrap"}},
	}, rows[0].Payload, "nested defaults are applied at Emit")

	pubsub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 100, Persistent: true}, watermill.NopLogger{})
	var (
		mu  sync.Mutex
		got = map[string]*testent.OrderPlaced{}
	)
	h := testent.NewOutboxHandlers(b.client)
	h.OnOrderPlaced("shipping", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPlaced, m events.Meta) error {
		mu.Lock()
		defer mu.Unlock()
		got[m.AggregateID] = e
		return nil
	})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	require.NoError(t, h.AddToRouter(router, func(string) (message.Subscriber, error) { return pubsub, nil }))
	routerCtx, stopRouter := context.WithCancel(ctx)
	routerDone := make(chan error, 1)
	go func() { routerDone <- router.Run(routerCtx) }()
	t.Cleanup(func() { stopRouter(); <-routerDone })
	<-router.Running()
	stop := runRelay(t, quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: pubsub}))

	// A version 1 payload, from a producer that knew no units nor countries.
	v1 := outboxtest.Message(t, testent.OrderPlacedV1{OrderID: 2,
		Lines:   []testent.OrderPlacedV1Line{{Sku: "salt", Qty: 3}},
		Address: testent.OrderPlacedV1Address{Street: "2 quai", City: "Nantes"}}, "bob")
	require.NoError(t, pubsub.Publish("orders", v1))

	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 2
	}, patience, 10*time.Millisecond, "both events handled")
	require.NoError(t, stop())
	require.Equal(t, &testent.OrderPlaced{OrderID: 1,
		Lines:      []testent.OrderPlacedLine{{Sku: "tea", Qty: 2, Unit: "piece"}, {Sku: "rice", Qty: 1, Unit: "kg", Pack: 4}},
		Address:    testent.OrderPlacedAddress{Street: "1 rue de la Paix", City: "Paris", Country: "FR"},
		Attributes: map[string]testent.OrderPlacedAttribute{"gift": {Value: "wrap"}},
	}, got["ada"])
	require.Equal(t, &testent.OrderPlaced{OrderID: 2,
		Lines:   []testent.OrderPlacedLine{{Sku: "salt", Qty: 3, Unit: "piece", Pack: 1}},
		Address: testent.OrderPlacedAddress{Street: "2 quai", City: "Nantes", Country: "FR"},
	}, got["bob"], "version 2's nested defaults reach a version 1 payload")
}
