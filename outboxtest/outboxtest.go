// Package outboxtest helps users test code that emits and handles outbox
// events: end to end with a Harness, or one transaction or one message at
// a time with the Require functions and Message.
//
// # End to end
//
// A Harness gives a test a database of its own: a PostgreSQL schema (on
// DATABASE_URL, or DefaultURL), a MySQL or MariaDB database (a mysql://
// DATABASE_URL, or WithDatabaseURL), or a SQLite file with OnSQLite, which
// needs no server. It runs the relay in-process on an in-memory broker of
// its own and the generated handlers on it, and waits until they handled
// what the test emitted:
//
//	func TestBilling(t *testing.T) {
//		t.Parallel()
//		h := outboxtest.New(t) // skips t when PostgreSQL is not reachable; fails it under CI=true
//		client := ent.NewClient(ent.Driver(h.Driver()))
//		h.Migrate(client.Schema.Create)
//
//		handlers := ent.NewOutboxHandlers(client)
//		handlers.OnOrderPaid("billing", billing.OnOrderPaid)
//		h.Start(handlers)
//
//		err := client.WithTx(ctx, func(tx *ent.Tx) error { ... tx.Outbox.EmitOrderPaid(ctx, ...) })
//		require.NoError(t, err)
//		h.RequireHandled() // or RequireDeadLettered, or Wait for the outcomes
//		require.Equal(t, 1, client.Invoice.Query().CountX(ctx))
//	}
//
// Wait fails the test when the events do not settle in time (a minute;
// WithTimeout), saying for each one where it stands: not published (with
// the relay's last error), or which consumer has not received it or not
// finished it. When the test ends the harness stops the relay and the
// handlers and drops the database, dedupe records and dead letters with it.
// Handlers built with consumer.WithTopicPrefix, as your application wires
// them, need the relay to publish under the same prefix:
// New(t, WithTopicPrefix(prefix)).
//
// On SQLite, New(t, OnSQLite()) runs the same test with no server, in a
// fraction of a second; with ent's enttest, which migrates the client:
//
//	h := outboxtest.New(t, outboxtest.OnSQLite())
//	client := enttest.NewClient(t, enttest.WithOptions(ent.Driver(h.Driver())))
//
// # One transaction, one message
//
// Assert that a transaction emitted an event, with ent's generated query on
// the same transaction:
//
//	paid := outboxtest.RequireEmitted[ent.OrderPaid](t, tx.Outbox.EmittedX(ctx))
//	require.Equal(t, int64(4200), paid.AmountCents)
//
// or that it scheduled one (events.DeliverAt, DeliverAfter) and for when,
// give or take a tolerance (the database's clock decides):
//
//	r := outboxtest.RequireScheduled[ent.PaymentReminder](t, tx.Outbox.ScheduledX(ctx), time.Now().Add(24*time.Hour), time.Minute)
//
// A Harness's Wait waits for a scheduled event due before its timeout,
// until the relay sends it and the handlers settle it; one due later is
// not waited for.
//
// Run a handler against an event, through the same dedupe, retries and dead
// letters as a broker delivery:
//
//	err := handlers.Handle(ctx, "billing", outboxtest.Message(t, ent.OrderPaid{OrderID: 1, AmountCents: 5}, "1"))
package outboxtest

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/outbox"
)

// Recorder is an outbox row: the generated *ent.Outbox is one.
type Recorder interface {
	OutboxRecord() events.Record
}

// RequireEmitted finds the one event of type T among rows and returns its
// payload; it fails t when there is none, more than one, or the row's
// version is not T's.
func RequireEmitted[T events.Payload, R Recorder](t testing.TB, rows []R) T {
	t.Helper()
	var zero T
	name, version := zero.OutboxEvent()
	var found []events.Record
	for _, r := range rows {
		if rec := r.OutboxRecord(); rec.Name == name {
			found = append(found, rec)
		}
	}
	switch {
	case len(found) == 0:
		t.Fatalf("outboxtest: no %q event was emitted (%d outbox rows)", name, len(rows))
	case len(found) > 1:
		t.Fatalf("outboxtest: %q was emitted %d times, want once (use RequireEmittedAll for several)", name, len(found))
	}
	return decode[T](t, found[0], name, version)
}

// RequireEmittedAll returns the payloads of every event of type T among
// rows, in order; it fails t when there is none.
func RequireEmittedAll[T events.Payload, R Recorder](t testing.TB, rows []R) []T {
	t.Helper()
	var zero T
	name, version := zero.OutboxEvent()
	var out []T
	for _, r := range rows {
		if rec := r.OutboxRecord(); rec.Name == name {
			out = append(out, decode[T](t, rec, name, version))
		}
	}
	if len(out) == 0 {
		t.Fatalf("outboxtest: no %q event was emitted (%d outbox rows)", name, len(rows))
	}
	return out
}

// RequireNotEmitted fails t when rows hold an event of type T.
func RequireNotEmitted[T events.Payload, R Recorder](t testing.TB, rows []R) {
	t.Helper()
	var zero T
	name, _ := zero.OutboxEvent()
	for _, r := range rows {
		if rec := r.OutboxRecord(); rec.Name == name {
			t.Fatalf("outboxtest: %q was emitted (event %s), want none", name, rec.EventID)
		}
	}
}

func decode[T events.Payload](t testing.TB, rec events.Record, name string, version int) T {
	t.Helper()
	var out T
	if rec.Version != version {
		t.Fatalf("outboxtest: %q event %s has version %d, %T is version %d", name, rec.EventID, rec.Version, out, version)
	}
	if err := json.Unmarshal(rec.Payload, &out); err != nil {
		t.Fatalf("outboxtest: decoding %q event %s: %v", name, rec.EventID, err)
	}
	return out
}

// Message builds the message the relay would publish for payload about
// aggregateID (as Emit takes it: events.AggregateID), as a consumer
// receives it: its declared defaults set where it holds no value, as Emit
// sets them (events.Defaulter).
func Message(t testing.TB, payload events.Payload, aggregateID events.AggregateID, opts ...events.EmitOption) *message.Message {
	t.Helper()
	name, version := payload.OutboxEvent()
	id, err := outbox.AggregateIDOf(name, version, aggregateID)
	if err != nil {
		t.Fatalf("outboxtest: %v", err)
	}
	v := reflect.ValueOf(payload)
	if v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	if v.Kind() == reflect.Struct {
		p := reflect.New(v.Type()) // a copy: the caller's value stays as it was
		p.Elem().Set(v)
		if d, ok := p.Interface().(events.Defaulter); ok {
			d.OutboxSetDefaults()
			payload = d
		}
	}
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatalf("outboxtest: encoding %q payload: %v", name, err)
	}
	msg, err := outbox.NewMessage(outbox.Event{Name: name, Version: version, AggregateID: id, Payload: b},
		events.NewEmitConfig(opts...))
	if err != nil {
		t.Fatalf("outboxtest: %v", err)
	}
	msg.Metadata.Set(events.MetaCreatedAt, time.Now().UTC().Format(time.RFC3339Nano))
	return msg
}
