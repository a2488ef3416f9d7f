package relay_test

import (
	"cmp"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay"
)

// events.AsVersion writes an older version only when consumers of the
// latest read back what the producer gave: a value the older version cannot
// carry (a field it lacks, not at what its readers fill in: the declared
// default, nothing, or what the declaration's Upcast sets) is refused with
// a *events.LossError naming the field, at any depth, and nothing is
// written. What is written reaches consumers of the latest through the
// relay as the producer gave it.
func TestEmitAsVersionLosesNothing(t *testing.T) {
	t.Parallel()
	p := setupPath(t, relay.PathFast)
	b := p.emitBundle
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	line := func(sku string) testent.OrderPlacedLine {
		return testent.OrderPlacedLine{Sku: sku, Qty: 2, Pack: 1} // Unit "" gets its default, "piece"
	}
	placed := func(edit func(*testent.OrderPlaced)) testent.OrderPlaced {
		e := testent.OrderPlaced{OrderID: 7, Lines: []testent.OrderPlacedLine{line("a"), line("b")},
			Address: testent.OrderPlacedAddress{Street: "1 rue Haute", City: "Lyon"}}
		if edit != nil {
			edit(&e)
		}
		return e
	}
	refused := []struct {
		name string
		emit func(tx *testent.Tx) error
		want string
	}{
		{"the issue's example", func(tx *testent.Tx) error {
			return tx.Outbox.EmitOrderPaid(ctx, "refused", testent.OrderPaid{OrderID: 5, AmountCents: 500, Currency: "USD"}, events.AsVersion(1))
		}, `events: "order.paid" cannot be written as version 1 without loss: field "currency" holds "USD", but consumers of version 2 would read "EUR" from the version 1 payload; set the field to what they would read, or emit version 2 once its consumers are deployed`},
		{"a list element's field", func(tx *testent.Tx) error {
			return tx.Outbox.EmitOrderPlaced(ctx, "refused", placed(func(e *testent.OrderPlaced) { e.Lines[1].Unit = "kg" }), events.AsVersion(1))
		}, `events: "order.placed" cannot be written as version 1 without loss: field "lines[1].unit" holds "kg", but consumers of version 2 would read "piece" from the version 1 payload; set the field to what they would read, or emit version 2 once its consumers are deployed`},
		{"a number at 0, whose default is 1", func(tx *testent.Tx) error {
			return tx.Outbox.EmitOrderPlaced(ctx, "refused", placed(func(e *testent.OrderPlaced) { e.Lines[0].Pack = 0 }), events.AsVersion(1))
		}, `events: "order.placed" cannot be written as version 1 without loss: field "lines[0].pack" holds 0, but consumers of version 2 would read 1 from the version 1 payload; set the field to what they would read, or emit version 2 once its consumers are deployed`},
		{"an object's field", func(tx *testent.Tx) error {
			return tx.Outbox.EmitOrderPlaced(ctx, "refused", placed(func(e *testent.OrderPlaced) { e.Address.Country = "DE" }), events.AsVersion(1))
		}, `events: "order.placed" cannot be written as version 1 without loss: field "address.country" holds "DE", but consumers of version 2 would read "FR" from the version 1 payload; set the field to what they would read, or emit version 2 once its consumers are deployed`},
		{"an optional map", func(tx *testent.Tx) error {
			return tx.Outbox.EmitOrderPlaced(ctx, "refused", placed(func(e *testent.OrderPlaced) {
				e.Attributes = map[string]testent.OrderPlacedAttribute{"gift": {Value: "yes"}}
			}), events.AsVersion(1))
		}, `events: "order.placed" cannot be written as version 1 without loss: field "attributes" holds {"gift":{"value":"yes"}}, but consumers of version 2 would read nothing from the version 1 payload; set the field to what they would read, or emit version 2 once its consumers are deployed`},
		{"a value an Upcast sets otherwise", func(tx *testent.Tx) error {
			return tx.Outbox.EmitShipmentBooked(ctx, "refused", testent.ShipmentBooked{OrderID: 9, Carrier: "ups", Service: "express"}, events.AsVersion(1))
		}, `events: "shipment.booked" cannot be written as version 1 without loss: field "service" holds "express", but consumers of version 2 would read "standard" from the version 1 payload; set the field to what they would read, or emit version 2 once its consumers are deployed`},
	}
	for _, r := range refused {
		require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
			err := r.emit(tx)
			var loss *events.LossError
			require.ErrorAs(t, err, &loss, r.name)
			require.EqualError(t, err, r.want, r.name)
			return nil // committed: the refused event was never written
		}))
	}
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	require.Contains(t, string(readme), refused[0].want, "README.md quotes the refusal as it is")
	var n int
	require.NoError(t, b.db.DB.QueryRow(`SELECT count(*) FROM outbox_events`).Scan(&n))
	require.Zero(t, n, "a refused downcast writes nothing")

	require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
		for _, emit := range []func() error{
			func() error { // Currency "" is the default, EUR
				return tx.Outbox.EmitOrderPaid(ctx, "paid", testent.OrderPaid{OrderID: 5, AmountCents: 500}, events.AsVersion(1))
			},
			func() error { return tx.Outbox.EmitOrderPlaced(ctx, "placed", placed(nil), events.AsVersion(1)) },
			func() error {
				return tx.Outbox.EmitShipmentBooked(ctx, "booked", testent.ShipmentBooked{OrderID: 9, Carrier: "ups", Service: "standard"}, events.AsVersion(1))
			},
		} {
			if err := emit(); err != nil {
				return err
			}
		}
		return nil
	}))
	versions := map[string]int{}
	rows, err := b.db.DB.Query(`SELECT aggregate_id, event_version FROM outbox_events`)
	require.NoError(t, err)
	for rows.Next() {
		var (
			agg string
			v   int
		)
		require.NoError(t, rows.Scan(&agg, &v))
		versions[agg] = v
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())
	require.Equal(t, map[string]int{"paid": 1, "placed": 1, "booked": 1}, versions)

	var (
		mu  sync.Mutex
		got = map[string]any{} // aggregate -> the event consumers of the latest handled
	)
	keep := func(m events.Meta, e any) {
		mu.Lock()
		defer mu.Unlock()
		got[m.AggregateID] = e
	}
	h := testent.NewOutboxHandlers(b.client)
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		keep(m, *e)
		return nil
	})
	h.OnOrderPlaced("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPlaced, m events.Meta) error {
		keep(m, *e)
		return nil
	})
	h.OnShipmentBooked("billing", func(ctx context.Context, tx *testent.Tx, e *testent.ShipmentBooked, m events.Meta) error {
		keep(m, *e)
		return nil
	})
	pubsub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	for _, topic := range []string{"orders", "shipments"} {
		msgs, err := pubsub.Subscribe(ctx, topic)
		require.NoError(t, err)
		go func() {
			for msg := range msgs {
				if err := h.Handle(ctx, "billing", msg); err != nil {
					msg.Nack()
					continue
				}
				msg.Ack()
			}
		}()
	}
	runRelay(t, p.config(relay.Config{Publisher: pubsub}))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 3
	}, patience, 20*time.Millisecond)

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]any{
		"paid": testent.OrderPaid{OrderID: 5, AmountCents: 500, Currency: "EUR"},
		"placed": placed(func(e *testent.OrderPlaced) {
			e.Lines[0].Unit, e.Lines[1].Unit, e.Address.Country = "piece", "piece", "FR"
		}),
		"booked": testent.ShipmentBooked{OrderID: 9, Carrier: "ups", Service: "standard"},
	}, got, "consumers of the latest version read what the producer gave")
}

// events.AsVersion refuses a value in each field version 1 of all.kinds
// lacks, at every depth (a top-level optional field, an optional field of
// an object, of a list element, and a defaulted field of a map value), and
// of a field version 1 has whose value it cannot carry; it writes the event
// as version 1 when each holds what consumers of version 2 read, and
// nothing when it refuses.
func TestEmitAsVersionAtEveryDepth(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	kinds := func(edit func(*testent.AllKinds)) testent.AllKinds {
		nick, ref := "ada", int64(-7)
		e := testent.AllKinds{S: "s", Nick: &nick, B: true, I: 1, I64: 2, Ref: &ref, F: 1.5, At: at, ID: uuid.New(),
			Size: "M", Sig: []byte{1}, Settings: json.RawMessage(`{}`), Tags: []string{"t"}, Friends: []int64{3},
			Address: testent.AllKindsAddress{City: "Lyon"}, Billing: &testent.AllKindsBilling{Vat: "FR1"},
			Lines: []testent.AllKindsLine{{Sku: "a", Qty: 1}, {Sku: "b", Qty: 2}}, Stock: map[string]int64{"a": 1},
			Attrs: map[string]testent.AllKindsAttr{"j": {Value: "x", Shown: true}, "k": {Value: "y", Shown: true}}}
		if edit != nil {
			edit(&e)
		}
		return e
	}
	refused := map[string]func(*testent.AllKinds){
		"channel":              func(e *testent.AllKinds) { e.Channel = "web" },
		"address.street":       func(e *testent.AllKinds) { e.Address.Street = "1 rue Haute" },
		"lines[1].discount":    func(e *testent.AllKinds) { e.Lines[1].Discount = 0.5 },
		`attrs["k"].shown`:     func(e *testent.AllKinds) { e.Attrs["k"] = testent.AllKindsAttr{Value: "y"} },
		`attrs["j"].shown`:     func(e *testent.AllKinds) { e.Attrs["j"] = testent.AllKindsAttr{Value: "x", At: at} },
		"lines[0].discount, 0": func(e *testent.AllKinds) { e.Lines[0].Discount = 1e-300 },
	}
	want := map[string]string{"lines[0].discount, 0": "lines[0].discount", `attrs["j"].shown`: `attrs["j"].shown`}
	for name, edit := range refused {
		require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
			err := tx.Outbox.EmitAllKinds(ctx, "refused", kinds(edit), events.AsVersion(1))
			var loss *events.LossError
			require.ErrorAs(t, err, &loss, name)
			require.Equal(t, cmp.Or(want[name], name), loss.Field, name)
			require.Equal(t, 1, loss.Version)
			require.Equal(t, 2, loss.Latest)
			return nil // committed: the refused event was never written
		}))
	}
	var n int
	require.NoError(t, b.db.DB.QueryRow(`SELECT count(*) FROM outbox_events`).Scan(&n))
	require.Zero(t, n, "a refused downcast writes nothing")

	require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
		return tx.Outbox.EmitAllKinds(ctx, "kept", kinds(nil), events.AsVersion(1))
	}))
	var (
		version int
		payload []byte
	)
	require.NoError(t, b.db.DB.QueryRow(`SELECT event_version, payload FROM outbox_events`).Scan(&version, &payload))
	require.Equal(t, 1, version)
	var v1 testent.AllKindsV1
	require.NoError(t, json.Unmarshal(payload, &v1))
	require.Equal(t, map[string]testent.AllKindsV1Attr{"j": {Value: "x"}, "k": {Value: "y"}}, v1.Attrs)
}
