package relay_test

import (
	"context"
	"fmt"
	"strings"
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

// A header no supported broker carries unchanged is refused at Emit,
// naming it, instead of being retried by the relay until it gives up; the
// transaction stays usable, and headers at the limits go through intact.
func TestEmitRefusesHeadersNoBrokerCarries(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	const prefix = `events: invalid "order.paid" v2 event: `
	fifteenK := strings.Repeat("v", 15<<10)
	refused := []struct {
		headers map[string]string
		want    string
	}{
		{map[string]string{"trace": "a\nb"}, `header "trace": value has a line break (LF)`},
		{map[string]string{"trace": "a\rb"}, `header "trace": value has a line break (CR)`},
		{map[string]string{"trace": "a\x01b"}, `header "trace": value has control character U+0001`},
		{map[string]string{"trace": " a"}, `header "trace": value starts or ends with a space or tab (NATS would trim it)`},
		{map[string]string{"trace": "a\t"}, `header "trace": value starts or ends with a space or tab (NATS would trim it)`},
		{map[string]string{"trace": "caf\xe9"}, `header "trace": value is not valid UTF-8`},
		{map[string]string{"trace": strings.Repeat("x", 1<<20)}, `header "trace": value is 1048576 bytes, more than 65536`},
		{map[string]string{"trace id": "x"}, `header "trace id": key has a space`},
		{map[string]string{"": "x"}, `header "": key is empty`},
		{map[string]string{"a:b": "x"}, `header "a:b": key has ':' (a key is ASCII letters, digits and !#$%&'*+-.^_` + "`" + `|~)`},
		{map[string]string{"a\nb": "x"}, `header "a\nb": key has a line break (LF)`},
		{map[string]string{"clé": "x"}, `header "clé": key has a non-ASCII character (a key is ASCII letters, digits and !#$%&'*+-.^_` + "`" + `|~)`},
		{map[string]string{strings.Repeat("k", 256): "x"}, `header "` + strings.Repeat("k", 64) + `"...: key is 256 bytes, more than 255`},
		{map[string]string{"Nats-Msg-Id": "x"}, `header "Nats-Msg-Id": key is reserved: the prefix "Nats-" belongs to NATS`},
		{map[string]string{"nats-expected-stream": "x"}, `header "nats-expected-stream": key is reserved: the prefix "Nats-" belongs to NATS`},
		{map[string]string{"_watermill_message_uuid": "x"}, `header "_watermill_message_uuid": key is reserved: Watermill carries the message UUID in it`},
		{map[string]string{"outbox_trace": "x"}, `header "outbox_trace": key uses the reserved prefix "outbox_"`},
		{map[string]string{"Outbox_Event_Name": "x"}, `header "Outbox_Event_Name": key uses the reserved prefix "outbox_"`},
		// Of several bad headers, the first in key order is named.
		{map[string]string{"b c": "x", "a\x00": "x"}, `header "a\x00": key has a NUL character`},
		{map[string]string{"h1": fifteenK, "h2": fifteenK, "h3": fifteenK, "h4": fifteenK, "h5": fifteenK},
			`headers hold 76810 bytes in all (keys and values), more than 65536`},
	}
	tx, err := b.client.Tx(ctx)
	require.NoError(t, err)
	for _, c := range refused {
		err := tx.Outbox.EmitOrderPaid(ctx, "1", testent.OrderPaid{OrderID: 1, AmountCents: 5}, events.WithHeaders(c.headers))
		var verr *events.ValidationError
		require.ErrorAs(t, err, &verr, "want %s", c.want)
		require.EqualError(t, err, prefix+c.want)
	}
	// At the limits: a 255-byte key of every symbol allowed, all headers
	// together at exactly 64 KiB, an empty value, a tab and non-ASCII text
	// inside a value.
	symbols := "!#$%&'*+-.^_`|~"
	longKey := symbols + strings.Repeat("K", 255-len(symbols))
	ok := map[string]string{
		longKey:       "x",
		"empty":       "",
		"inner":       "a\tb c",
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"unicode":     "café ☕",
	}
	used := 0
	for k, v := range ok {
		used += len(k) + len(v)
	}
	ok["pad"] = strings.Repeat("p", events.MaxHeadersBytes-used-len("pad"))
	require.NoError(t, tx.Outbox.EmitOrderPaid(ctx, "1", testent.OrderPaid{OrderID: 1, AmountCents: 5}, events.WithHeaders(ok)))
	require.NoError(t, tx.Commit())
	rows := b.rows(t)
	require.Len(t, rows, 1, "nothing of the refused events, the accepted one")
	require.Equal(t, ok, rows[0].Headers, "stored as given, no character replaced")
}

// An aggregate id no broker carries unchanged (it travels as a header and
// a Kafka key), or that PostgreSQL cannot store, is refused at Emit; a NUL
// used to fail the whole commit.
func TestEmitRefusesAggregateIDsNoBrokerCarries(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	const prefix = `events: invalid "order.paid" v2 event: `
	refused := map[string]string{
		"":                       `aggregate id is empty`,
		"order-1\n":              `aggregate id "order-1\n" has a line break (LF)`,
		"order\r1":               `aggregate id "order\r1" has a line break (CR)`,
		"order\t1":               `aggregate id "order\t1" has a tab`,
		"order\x001":             `aggregate id "order\x001" has a NUL character`,
		"order-1 ":               `aggregate id "order-1 " starts or ends with white space`,
		" order-1":               `aggregate id " order-1" starts or ends with white space`,
		"order-1\u00a0":          `aggregate id "order-1\u00a0" starts or ends with white space`,
		"caf\xe9":                `aggregate id "caf\xe9" is not valid UTF-8`,
		strings.Repeat("a", 256): `aggregate id "` + strings.Repeat("a", 64) + `"... is 256 bytes, more than 255`,
	}
	accepted := []string{"order-1", "a b", "café/42", strings.Repeat("a", 255)}
	err := b.client.WithTx(ctx, func(tx *testent.Tx) error {
		for id, want := range refused {
			err := tx.Outbox.EmitOrderPaid(ctx, id, testent.OrderPaid{OrderID: 1, AmountCents: 5})
			var verr *events.ValidationError
			require.ErrorAs(t, err, &verr, "aggregate id %q", id)
			require.EqualError(t, err, prefix+want)
		}
		for _, id := range accepted {
			if err := tx.Outbox.EmitOrderPaid(ctx, id, testent.OrderPaid{OrderID: 1, AmountCents: 5}); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err, "the refusals leave the transaction able to commit")
	var got []string
	for _, r := range b.rows(t) {
		got = append(got, r.AggregateID)
	}
	require.Equal(t, accepted, got)
}

// A required list must be non-nil (nil would go out as JSON null); an
// empty list is a value. An optional list may be nil, and is left out.
func TestEmitRequiredListRefusesNil(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	p := testent.ProfileUpdated{DisplayName: "Ada", UpdatedAt: time.Now(), SessionID: uuid.New(), Plan: "free",
		Settings: []byte(`{}`)}
	require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
		err := tx.Outbox.EmitProfileUpdated(ctx, "p1", p)
		var verr *events.ValidationError
		require.ErrorAs(t, err, &verr)
		require.Equal(t, "tags", verr.Field)
		require.EqualError(t, err, `events: invalid "profile.updated" v1 payload: field "tags" is required (nil; give an empty list for none)`)
		p.Tags = []string{}
		return tx.Outbox.EmitProfileUpdated(ctx, "p1", p)
	}))
	rows := b.rows(t)
	require.Len(t, rows, 1)
	require.Equal(t, []any{}, rows[0].Payload["tags"])
	require.NotContains(t, rows[0].Payload, "friend_ids", "a nil optional list is left out")
}

// events.ReturnEventID tells the id of an event while it is still held:
// nothing is written before the commit, and the row then has that id.
func TestEmitReturnEventIDWritesNothingEarly(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	tx, err := b.client.Tx(ctx)
	require.NoError(t, err)

	var first, second uuid.UUID
	require.NoError(t, tx.Outbox.EmitOrderPaid(ctx, "1", testent.OrderPaid{OrderID: 1, AmountCents: 5}, events.ReturnEventID(&first)))
	require.NoError(t, tx.Outbox.EmitOrderPaid(ctx, "1", testent.OrderPaid{OrderID: 1, AmountCents: 6}, events.ReturnEventID(&second)))
	require.Equal(t, uuid.Version(7), first.Version())
	require.NotEqual(t, first, second)
	n, err := tx.Outbox.Query().Count(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "the events are still held: nothing written early")

	// A given id is returned as given; a refused event leaves the target alone.
	given := uuid.New()
	var third uuid.UUID
	require.NoError(t, tx.Outbox.EmitOrderPaid(ctx, "2", testent.OrderPaid{OrderID: 2, AmountCents: 5},
		events.WithEventID(given), events.ReturnEventID(&third)))
	require.Equal(t, given, third)
	untouched := uuid.Nil
	require.Error(t, tx.Outbox.EmitOrderPaid(ctx, "", testent.OrderPaid{OrderID: 3, AmountCents: 5}, events.ReturnEventID(&untouched)))
	require.Equal(t, uuid.Nil, untouched)
	require.NoError(t, tx.Commit())

	var ids []uuid.UUID
	for _, r := range b.rows(t) {
		ids = append(ids, r.EventID)
	}
	require.Equal(t, []uuid.UUID{first, second, given}, ids)
}

// The relay refuses what Emit refuses: a row written by hand with a header
// or aggregate id no broker carries goes to the dead letters at once, with
// Emit's reason, without an attempt, even on a broker that would take it.
func TestRelaySetsAsideHeadersAndAggregateIDsEmitRefuses(t *testing.T) {
	t.Parallel()
	forPaths(t, func(t *testing.T, p *onPath) {
		b := p.emitBundle
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		pubsub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1000, Persistent: true}, watermill.NopLogger{})
		msgs, err := pubsub.Subscribe(ctx, "orders")
		require.NoError(t, err)
		got := newReceived()
		go consume(ctx, msgs, got)

		before := emitOrders(t, b.client, 4, 2, 0)
		_, err = b.db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers) VALUES
			(gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', 'order-a', '{"order_id": 1}', '{"trace id": "x"}'),
			(gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', E'order-b\n', '{"order_id": 2}', NULL),
			(gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', 'order-c', '{"order_id": 3}', '{"Nats-Msg-Id": "x"}')`)
		require.NoError(t, err)
		after := emitOrders(t, b.client, 4, 2, 0)

		runRelay(t, p.config(relay.Config{Publisher: pubsub}))
		got.waitFor(t, before, patience)
		got.waitFor(t, after, patience)
		waitDelivered(t, b, 3)
		require.Equal(t, 8, got.distinct(), "the refused rows are not published")

		rows, err := b.db.DB.Query(`SELECT reason, attempts FROM outbox_dead_letters ORDER BY aggregate_id`)
		require.NoError(t, err)
		defer rows.Close()
		var dead []string
		for rows.Next() {
			var (
				reason   string
				attempts int
			)
			require.NoError(t, rows.Scan(&reason, &attempts))
			dead = append(dead, fmt.Sprintf("%s (%d attempts)", reason, attempts))
		}
		require.NoError(t, rows.Err())
		require.Equal(t, []string{
			`events: header "trace id": key has a space (0 attempts)`,
			`events: aggregate id "order-b\n" has a line break (LF) (0 attempts)`,
			`events: header "Nats-Msg-Id": key is reserved: the prefix "Nats-" belongs to NATS (0 attempts)`,
		}, dead)
	})
}
