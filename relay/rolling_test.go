package relay_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay"
)

// A rolling deploy end to end: a producer one version ahead wrote rows of
// order.paid versions 3 and 4 (this code knows up to 2). The relay carries their
// readable_from; the consumer handles the one readable as version 2, sets
// the others aside with the reason, and the other events keep flowing.
func TestRollingDeployNewerVersionThroughTheRelay(t *testing.T) {
	t.Parallel()
	forPaths(t, testRollingDeployNewerVersion)
}

func testRollingDeployNewerVersion(t *testing.T, p *onPath) {
	b := p.emitBundle
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	_, err := b.db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, readable_from, topic, aggregate_type, aggregate_id, payload) VALUES
		(gen_random_uuid(), 'order.paid', 3, 2, 'orders', 'Order', 'readable', '{"order_id": 1, "amount_cents": 100, "currency": "USD", "note": "v3"}'),
		(gen_random_uuid(), 'order.paid', 3, NULL, 'orders', 'Order', 'unreadable', '{"order_id": 2, "amount_cents": 200, "currency": "USD", "note": "v3"}'),
		(gen_random_uuid(), 'order.paid', 4, 3, 'orders', 'Order', 'too-new', '{"order_id": 3, "amount_cents": 300, "currency": "USD", "note": "v3"}')`)
	require.NoError(t, err)
	require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
		// Not "unreadable": the database numbers the rows above, so its
		// later events are held behind its dead letter.
		for _, agg := range []string{"later", "other"} {
			if err := tx.Outbox.EmitOrderPaid(ctx, agg, testent.OrderPaid{OrderID: 4, AmountCents: 400}); err != nil {
				return err
			}
		}
		return nil
	}))

	var (
		mu       sync.Mutex
		handled  = map[string]int{}    // aggregate -> version emitted
		readable = map[string]string{} // aggregate/version -> outbox_readable_from relayed
	)
	h := testent.NewOutboxHandlers(b.client)
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		mu.Lock()
		defer mu.Unlock()
		handled[m.AggregateID] = m.Version
		return nil
	})
	pubsub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	msgs, err := pubsub.Subscribe(ctx, "orders")
	require.NoError(t, err)
	go func() {
		for msg := range msgs {
			mu.Lock()
			readable[msg.Metadata.Get(events.MetaAggregateID)+"/"+msg.Metadata.Get(events.MetaEventVersion)] = msg.Metadata.Get(events.MetaReadableFrom)
			mu.Unlock()
			if err := h.Handle(ctx, "billing", msg); err != nil {
				msg.Nack()
				continue
			}
			msg.Ack()
		}
	}()
	runRelay(t, p.config(relay.Config{Publisher: pubsub}))

	deadLetters := func() map[string]string {
		rows, err := b.db.DB.Query(`SELECT aggregate_id, reason FROM outbox_dead_letters WHERE source = 'billing'`)
		require.NoError(t, err)
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var agg, reason string
			require.NoError(t, rows.Scan(&agg, &reason))
			out[agg] = reason
		}
		return out
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == 3 && len(deadLetters()) == 2
	}, patience, 20*time.Millisecond, "handled %v, dead letters %v", handled, deadLetters())

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]int{"readable": 3, "later": 2, "other": 2}, handled,
		"version 3 readable as 2 is handled, and the aggregates keep flowing")
	require.Equal(t, map[string]string{"readable/3": "2", "unreadable/3": "", "too-new/4": "3", "later/2": "1", "other/2": "1"}, readable,
		"the relay carries readable_from (the emitted version 2 is readable from 1)")
	reason := func(version string) string {
		return "event \"order.paid\" version " + version + " is newer than the newest this code knows (2) and not readable as version 2; " +
			"deploy the consumer that knows it, then `entoutbox dead-letters retry`"
	}
	require.Equal(t, map[string]string{"unreadable": reason("3"), "too-new": reason("4")}, deadLetters())
}

// events.AsVersion holds a producer back: the row carries the older
// version, its payload shape and its own readable_from; a version its
// consumers could not read from the latest is refused, writing nothing.
func TestEmitAsVersionWritesTheOlderVersion(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
		paid := testent.OrderPaid{OrderID: 1, AmountCents: 100, Currency: "USD"}
		// Version 1 lacks currency: only its default is written as version 1
		// (TestEmitAsVersionLosesNothing).
		held := testent.OrderPaid{OrderID: 1, AmountCents: 100, Currency: "EUR"}
		if err := tx.Outbox.EmitOrderPaid(ctx, "held", held, events.AsVersion(1)); err != nil {
			return err
		}
		if err := tx.Outbox.EmitOrderPaid(ctx, "latest", paid, events.AsVersion(2)); err != nil {
			return err
		}
		return tx.Outbox.EmitOrderPaid(ctx, "default", paid)
	}))
	rows, err := b.db.DB.Query(`SELECT aggregate_id, event_version, readable_from, payload FROM outbox_events ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	type written struct {
		version      int
		readableFrom sql.NullInt64
		payload      map[string]any
	}
	got := map[string]written{}
	for rows.Next() {
		var (
			agg string
			w   written
			js  []byte
		)
		require.NoError(t, rows.Scan(&agg, &w.version, &w.readableFrom, &js))
		require.NoError(t, json.Unmarshal(js, &w.payload))
		got[agg] = w
	}
	require.NoError(t, rows.Err())
	v2 := map[string]any{"order_id": 1.0, "amount_cents": 100.0, "currency": "USD"}
	require.Equal(t, map[string]written{
		"held":    {version: 1, payload: map[string]any{"order_id": 1.0, "amount_cents": 100.0}},
		"latest":  {version: 2, readableFrom: sql.NullInt64{Int64: 1, Valid: true}, payload: v2},
		"default": {version: 2, readableFrom: sql.NullInt64{Int64: 1, Valid: true}, payload: v2},
	}, got)

	// price.changed version 3 renamed a field: consumers of 1 or 2 cannot
	// read it, so it cannot be written as them.
	err = b.client.WithTx(ctx, func(tx *testent.Tx) error {
		err := tx.Outbox.EmitPriceChanged(ctx, "sku-1", testent.PriceChanged{Sku: "sku-1", Amount: 9.5, Currency: "EUR"}, events.AsVersion(2))
		require.ErrorIs(t, err, events.ErrVersionNotWritable)
		require.EqualError(t, err, `events: the event cannot be written as that version: "price.changed" version 2: its consumers cannot read version 3, as the step from version 2 to 3 is not forward compatible: field "cents" was removed (rule FIELD_REMOVE_REQUIRED); `+
			`deploy the consumers of version 3 first, then emit the latest; until then, keep emitting version 2 from a build whose latest version it is`)
		err = tx.Outbox.EmitOrderPaid(ctx, "x", testent.OrderPaid{OrderID: 1, AmountCents: 1}, events.AsVersion(4))
		require.ErrorIs(t, err, events.ErrVersionNotWritable)
		require.EqualError(t, err, `events: the event cannot be written as that version: "order.paid" version 4 is not declared (versions 1 to 2)`)
		return nil // committed: the refused events were never written
	})
	require.NoError(t, err)
	var n int
	require.NoError(t, b.db.DB.QueryRow(`SELECT count(*) FROM outbox_events WHERE aggregate_id IN ('sku-1', 'x')`).Scan(&n))
	require.Zero(t, n)
}
