package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/mysqltest"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/internal/testent/deadletter"
	"github.com/entoutbox/entoutbox/internal/testent/invoice"
	"github.com/entoutbox/entoutbox/internal/testent/processedevent"
	"github.com/entoutbox/entoutbox/outboxtest"
)

type bundle struct {
	db     *pgtest.DB
	client *testent.Client
}

// eachDatabase runs test on a bundle of its own on PostgreSQL and on
// SQLite: the consumers' guarantees hold on both, from the same code.
func eachDatabase(t *testing.T, test func(t *testing.T, b *bundle)) {
	for name, open := range map[string]func(t *testing.T) *bundle{"PostgreSQL": setup, "SQLite": setupSQLite, "MariaDB": setupMySQL} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, open(t))
		})
	}
}

// setupSQLite is setup on a SQLite file of t's own (b.db is nil).
func setupSQLite(t *testing.T) *bundle {
	t.Helper()
	client := testent.NewClient(testent.Driver(outboxtest.SQLite(t)))
	require.NoError(t, client.Schema.Create(context.Background()))
	return &bundle{client: client}
}

// setupMySQL is setup on a MariaDB (or MySQL) database of t's own (b.db
// is nil).
func setupMySQL(t *testing.T) *bundle {
	t.Helper()
	db, _ := mysqltest.Open(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.MySQL, db)))
	require.NoError(t, client.Schema.Create(context.Background()))
	return &bundle{client: client}
}

func setup(t *testing.T) *bundle {
	t.Helper()
	db := pgtest.New(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	pgtest.Migrate(t, client.Schema.Create)
	return &bundle{db: db, client: client}
}

// invoiceHandler writes the effect: one invoice per handled event.
func invoiceHandler(calls *atomic.Int64) testent.OrderPaidHandler {
	return func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		calls.Add(1)
		return tx.Invoice.Create().SetOrderID(e.OrderID).SetAmountCents(e.AmountCents).
			SetCurrency(e.Currency).SetConsumer(m.Consumer).Exec(ctx)
	}
}

func fast() []consumer.Option {
	return []consumer.Option{consumer.WithBackoff(5*time.Millisecond, 20*time.Millisecond)}
}

func (b *bundle) invoices(t *testing.T, consumerName string) int {
	t.Helper()
	return b.client.Invoice.Query().Where(invoice.Consumer(consumerName)).CountX(context.Background())
}

func TestDirectDuplicatesHaveOneEffect(t *testing.T) {
	t.Parallel()
	eachDatabase(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		var calls atomic.Int64
		h := testent.NewOutboxHandlers(b.client, fast()...)
		h.OnOrderPaid("billing", invoiceHandler(&calls))
		msg := outboxtest.Message(t, testent.OrderPaid{OrderID: 7, AmountCents: 700, Currency: "USD"}, "7")
		for range 5 {
			require.NoError(t, h.Handle(ctx, "billing", msg.Copy()))
		}
		require.Equal(t, 1, b.invoices(t, "billing"))
		require.Equal(t, int64(1), calls.Load(), "duplicates do not reach the handler")
		pe := b.client.ProcessedEvent.Query().OnlyX(ctx)
		require.Equal(t, "billing", pe.Consumer)
		require.Equal(t, msg.UUID, pe.EventID.String())
		require.Equal(t, 1, pe.Attempts)
	})
}

func TestEachConsumerNameHandlesTheEventOnce(t *testing.T) {
	t.Parallel()
	eachDatabase(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		var calls atomic.Int64
		h := testent.NewOutboxHandlers(b.client, fast()...)
		h.OnOrderPaid("billing", invoiceHandler(&calls))
		h.OnOrderPaid("audit", invoiceHandler(&calls))
		msg := outboxtest.Message(t, testent.OrderPaid{OrderID: 1, AmountCents: 5}, "1")
		for range 3 {
			require.NoError(t, h.Handle(ctx, "billing", msg.Copy()))
			require.NoError(t, h.Handle(ctx, "audit", msg.Copy()))
		}
		require.Equal(t, 1, b.invoices(t, "billing"))
		require.Equal(t, 1, b.invoices(t, "audit"))
	})
}

// Two instances of the same consumer name get the same event at the same
// time: the unique (consumer, event id) makes one wait and then skip.
func TestConcurrentDuplicatesAcrossInstances(t *testing.T) {
	t.Parallel()
	eachDatabase(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		var calls atomic.Int64
		slow := func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
			time.Sleep(30 * time.Millisecond) // hold the transaction open while the twin arrives
			return invoiceHandler(&calls)(ctx, tx, e, m)
		}
		instances := []*testent.OutboxHandlers{testent.NewOutboxHandlers(b.client, fast()...), testent.NewOutboxHandlers(b.client, fast()...)}
		for _, h := range instances {
			h.OnOrderPaid("billing", slow)
		}
		const events = 10
		var wg sync.WaitGroup
		for i := range events {
			msg := outboxtest.Message(t, testent.OrderPaid{OrderID: int64(i + 1), AmountCents: 5}, "a")
			for _, h := range instances {
				for range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						assert.NoError(t, h.Handle(ctx, "billing", msg.Copy())) // assert: FailNow must not run in a goroutine
					}()
				}
			}
		}
		wg.Wait()
		require.Equal(t, events, b.invoices(t, "billing"))
		require.Equal(t, int64(events), calls.Load())
	})
}

func TestFailingTwiceThenSucceedingHasOneEffect(t *testing.T) {
	t.Parallel()
	eachDatabase(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		var attempts []int
		h := testent.NewOutboxHandlers(b.client, fast()...)
		h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
			attempts = append(attempts, m.Attempt)
			// The effect is written before the failure: it must roll back.
			if err := tx.Invoice.Create().SetOrderID(e.OrderID).SetAmountCents(1).SetCurrency("EUR").SetConsumer("billing").Exec(ctx); err != nil {
				return err
			}
			switch m.Attempt {
			case 1:
				return errors.New("payment service unavailable")
			case 2:
				panic("nil map somewhere")
			}
			return nil
		})
		require.NoError(t, h.Handle(ctx, "billing", outboxtest.Message(t, testent.OrderPaid{OrderID: 3, AmountCents: 5}, "3")))
		require.Equal(t, []int{1, 2, 3}, attempts)
		require.Equal(t, 1, b.invoices(t, "billing"))
		require.Equal(t, 3, b.client.ProcessedEvent.Query().OnlyX(ctx).Attempts, "the successful attempt is recorded")
		require.Zero(t, b.client.DeadLetter.Query().CountX(ctx))
	})
}

func TestAlwaysFailingGoesToDeadLettersAndOthersFlow(t *testing.T) {
	t.Parallel()
	eachDatabase(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		var calls atomic.Int64
		h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithMaxAttempts(3))...)
		h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
			if e.OrderID == 13 {
				return errors.New("order 13 is cursed")
			}
			return invoiceHandler(&calls)(ctx, tx, e, m)
		})
		poison := outboxtest.Message(t, testent.OrderPaid{OrderID: 13, AmountCents: 5}, "13", events.WithHeader("correlation_id", "c-13"))
		require.NoError(t, h.Handle(ctx, "billing", poison), "given up on: acknowledged")
		require.NoError(t, h.Handle(ctx, "billing", outboxtest.Message(t, testent.OrderPaid{OrderID: 14, AmountCents: 5}, "14")))
		require.Equal(t, 1, b.invoices(t, "billing"), "the next event is handled")

		dl := b.client.DeadLetter.Query().OnlyX(ctx)
		require.Equal(t, "billing", dl.Source)
		require.Equal(t, poison.UUID, dl.EventID.String())
		require.Equal(t, "order 13 is cursed", dl.Reason)
		require.Equal(t, 3, dl.Attempts)
		require.Equal(t, "order.paid", dl.EventName)
		require.Equal(t, "13", dl.AggregateID)
		require.JSONEq(t, string(poison.Payload), string(dl.Payload))
		require.JSONEq(t, `{"correlation_id": "c-13"}`, string(dl.Headers))
		require.Zero(t, b.client.ProcessedEvent.Query().Where(processedevent.EventID(uuid.MustParse(poison.UUID))).CountX(ctx))
	})
}

func TestOlderVersionsAreUpcast(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var got *testent.OrderPaid
	var meta events.Meta
	h := testent.NewOutboxHandlers(b.client, fast()...)
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		got, meta = e, m
		return nil
	})
	// A v1 row, emitted by code that did not know about currencies yet.
	require.NoError(t, h.Handle(ctx, "billing", outboxtest.Message(t, testent.OrderPaidV1{OrderID: 9, AmountCents: 900}, "9")))
	require.Equal(t, &testent.OrderPaid{OrderID: 9, AmountCents: 900, Currency: "EUR"}, got)
	require.Equal(t, 1, meta.Version, "the handler can still tell what was emitted")
	require.Equal(t, "9", meta.AggregateID)
	require.Equal(t, "billing", meta.Consumer)
}

func TestUnhandleableMessagesAreDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var calls atomic.Int64
	h := testent.NewOutboxHandlers(b.client, fast()...)
	h.OnOrderPaid("billing", invoiceHandler(&calls))

	v3 := outboxtest.Message(t, testent.OrderPaid{OrderID: 1, AmountCents: 5}, "1")
	v3.Metadata.Set(events.MetaEventVersion, "3")
	unknown := outboxtest.Message(t, testent.OrderPaid{OrderID: 2, AmountCents: 5}, "2")
	unknown.Metadata.Set(events.MetaEventName, "order.refunded")
	garbage := outboxtest.Message(t, testent.OrderPaid{OrderID: 3, AmountCents: 5}, "3")
	garbage.Payload = []byte("not json")
	invalid := outboxtest.Message(t, testent.OrderPaid{OrderID: 4, AmountCents: 5}, "4")
	invalid.Payload = []byte(`{"order_id": 4, "amount_cents": -1, "currency": "EUR"}`)
	noID := outboxtest.Message(t, testent.OrderPaid{OrderID: 5, AmountCents: 5}, "5")
	noID.UUID = "not-a-uuid"
	// Valid as v1 (no bound), not once upcast to v2 (positive).
	upcastInvalid := outboxtest.Message(t, testent.OrderPaidV1{OrderID: 6, AmountCents: -1}, "6")

	for _, msg := range []*message.Message{v3, unknown, garbage, invalid, noID, upcastInvalid} {
		require.NoError(t, h.Handle(ctx, "billing", msg))
	}
	require.Zero(t, calls.Load())
	reasons := map[string]string{}
	for _, dl := range b.client.DeadLetter.Query().Order(deadletter.ByID()).AllX(ctx) {
		reasons[dl.AggregateID] = dl.Reason
	}
	require.Equal(t, map[string]string{
		"1": "event \"order.paid\" version 3 is newer than the newest this code knows (2) and not readable as version 2; " +
			"deploy the consumer that knows it, then `entoutbox dead-letters retry`",
		"2": `unknown event "order.refunded" (version 2): this code declares no such event`,
		"3": `events: invalid "order.paid" v2 event: the payload is not JSON: invalid character 'o' in literal null (expecting 'u') (JSON Schema entoutbox/schemas/order.paid.v2.json)`,
		"4": `events: invalid "order.paid" v2 payload: field "amount_cents" value -1 is not positive (JSON Schema entoutbox/schemas/order.paid.v2.json)`,
		"5": `malformed message: message UUID "not-a-uuid" is not an event id`,
		"6": `version 1 payload upcast to version 2: events: invalid "order.paid" v2 payload: field "amount_cents" value -1 is not positive`,
	}, reasons)
}

func TestRegisteringTwiceOrUnknownPanics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int64
	h := testent.NewOutboxHandlers(b.client)
	h.OnOrderPaid("billing", invoiceHandler(&calls))
	require.PanicsWithError(t, `consumer: "billing" already has a handler for "order.paid"`, func() {
		h.OnOrderPaid("billing", invoiceHandler(&calls))
	})
	require.PanicsWithError(t, `consumer: handler of "order.paid": consumer name is empty`, func() {
		h.OnOrderPaid("", invoiceHandler(&calls))
	})
}

// TestRegisterReturnsTheError registers through the error-returning
// Register<Event> that On<Event> panics beside: each refusal names the event
// and the consumer, and leaves the handlers registered before in place.
func TestRegisterReturnsTheError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int64
	h := testent.NewOutboxHandlers(b.client)
	require.NoError(t, h.RegisterOrderPaid("billing", invoiceHandler(&calls)))
	require.NoError(t, h.RegisterOrderPaid("audit", invoiceHandler(&calls)), "another consumer name handles the event too")
	require.NoError(t, h.RegisterPriceChanged("billing", func(context.Context, *testent.Tx, *testent.PriceChanged, events.Meta) error { return nil }),
		"the consumer handles another event")

	err := h.RegisterOrderPaid("billing", invoiceHandler(&calls))
	require.EqualError(t, err, `consumer: "billing" already has a handler for "order.paid"`)
	require.EqualError(t, h.RegisterOrderPaid("", invoiceHandler(&calls)), `consumer: handler of "order.paid": consumer name is empty`)
	require.EqualError(t, h.RegisterOrderPaid("billing", nil), `consumer: "billing": handler of "order.paid" is nil`)
	require.EqualError(t, h.RegisterOrderPaid("ledger", nil), `consumer: "ledger": handler of "order.paid" is nil`)

	// The first billing handler still runs, once.
	ctx := context.Background()
	require.NoError(t, h.Handle(ctx, "billing", outboxtest.Message(t, testent.OrderPaid{OrderID: 3, AmountCents: 300, Currency: "EUR"}, "3")))
	require.Equal(t, int64(1), calls.Load())
	require.Equal(t, 1, b.invoices(t, "billing"))
}

func TestDeadLettersAlsoGoToABrokerTopic(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubsub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 10, Persistent: true}, watermill.NopLogger{})
	dead, err := pubsub.Subscribe(ctx, "dead-letters")
	require.NoError(t, err)

	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithMaxAttempts(2),
		consumer.WithDeadLetterTopic(pubsub, "dead-letters"))...)
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		return errors.New("ledger closed")
	})
	msg := outboxtest.Message(t, testent.OrderPaid{OrderID: 5, AmountCents: 5}, "5")
	require.NoError(t, h.Handle(ctx, "billing", msg))

	select {
	case got := <-dead:
		require.Equal(t, msg.UUID, got.UUID)
		require.Equal(t, "ledger closed", got.Metadata.Get(consumer.MetaDeadLetterReason))
		require.Equal(t, "billing", got.Metadata.Get(consumer.MetaDeadLetterConsumer))
		require.Equal(t, "2", got.Metadata.Get(consumer.MetaDeadLetterAttempts))
		require.Equal(t, "order.paid", got.Metadata.Get(events.MetaEventName))
		got.Ack()
	case <-time.After(patience):
		t.Fatal("no dead letter on the topic")
	}
	require.Equal(t, 1, b.client.DeadLetter.Query().CountX(ctx), "and in the table")
}

// Versions 1 and 2 reach a v3 handler: the automatic step fills the
// default, the declared upcaster turns cents into an amount; a payload its
// version's schema refuses is dead-lettered before any upcaster sees it,
// so an upcaster gets the kinds its version declares.
func TestDeclaredUpcaster(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	got := map[string]testent.PriceChanged{}
	h := testent.NewOutboxHandlers(b.client, fast()...)
	h.OnPriceChanged("catalog", func(ctx context.Context, tx *testent.Tx, e *testent.PriceChanged, m events.Meta) error {
		got[e.Sku] = *e
		return nil
	})
	require.NoError(t, h.Handle(ctx, "catalog", outboxtest.Message(t, testent.PriceChangedV1{Sku: "a", Cents: 1999}, "a")))
	require.NoError(t, h.Handle(ctx, "catalog", outboxtest.Message(t, testent.PriceChangedV2{Sku: "b", Cents: 500, Currency: "USD"}, "b")))
	require.NoError(t, h.Handle(ctx, "catalog", outboxtest.Message(t, testent.PriceChanged{Sku: "c", Amount: 1.5, Currency: "GBP"}, "c")))
	require.Equal(t, map[string]testent.PriceChanged{
		"a": {Sku: "a", Amount: 19.99, Currency: "EUR"},
		"b": {Sku: "b", Amount: 5, Currency: "USD"},
		"c": {Sku: "c", Amount: 1.5, Currency: "GBP"},
	}, got)

	bad := outboxtest.Message(t, testent.PriceChangedV2{Sku: "d", Cents: 1}, "d")
	bad.Payload = []byte(`{"sku": "d", "cents": "twelve"}`)
	require.NoError(t, h.Handle(ctx, "catalog", bad))
	require.NotContains(t, got, "d")
	require.Equal(t, `events: invalid "price.changed" v2 payload: field "cents" is a string, want integer (JSON Schema entoutbox/schemas/price.changed.v2.json)`,
		b.client.DeadLetter.Query().OnlyX(ctx).Reason)
}

// A handler that panics every time is a failure like any other: retried,
// then a dead letter whose reason says it panicked and with what; the error
// is a *consumer.PanicError for errors.As.
func TestPanickingHandlerIsDeadLetteredWithTheValue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithMaxAttempts(2))...)
	h.OnOrderPaid("billing", func(context.Context, *testent.Tx, *testent.OrderPaid, events.Meta) error {
		panic("nil map somewhere")
	})
	require.NoError(t, h.Handle(ctx, "billing", outboxtest.Message(t, testent.OrderPaid{OrderID: 7, AmountCents: 5}, "7")))
	dl := b.client.DeadLetter.Query().OnlyX(ctx)
	require.Contains(t, dl.Reason, "handler panicked: nil map somewhere")

	var pe *consumer.PanicError
	require.True(t, errors.As(fmt.Errorf("handling: %w", &consumer.PanicError{Value: 42}), &pe))
	require.Equal(t, 42, pe.Value)
}
