package consumer_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/internal/testent/deadletter"
	"github.com/entoutbox/entoutbox/outboxtest"
)

// Any producer on a topic can send text PostgreSQL cannot store (NUL,
// bytes that are not UTF-8) in an event name, a header or an aggregate id.
// Its dead letter is still written, with that text escaped and the reason
// saying so, and the delivery is acknowledged: unescaped, the INSERT fails,
// the message is nacked and comes back at once, for ever.
func TestDeadLetterOfTextPostgresCannotHoldIsWritten(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithMaxAttempts(1))...)
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		return errors.New("refused \x00 order " + m.AggregateID)
	})

	nulName := outboxtest.Message(t, testent.OrderPaid{OrderID: 1, AmountCents: 5}, "1")
	nulName.Metadata.Set(events.MetaEventName, "order.\x00paid")
	badName := outboxtest.Message(t, testent.OrderPaid{OrderID: 2, AmountCents: 5}, "2")
	badName.Metadata.Set(events.MetaEventName, "order.\xffpaid")
	badName.Payload = []byte("\x00\xff not JSON")
	// outboxtest.Message refuses what the outbox never writes; a producer
	// other than ours sets it on the message.
	badHeader := outboxtest.Message(t, testent.OrderPaid{OrderID: 3, AmountCents: 5}, "3")
	badHeader.Metadata.Set(events.MetaAggregateID, "3\xfe")
	badHeader.Metadata.Set("trace", "a\x00b\xff\\c")
	badHeader.Metadata.Set("k\x00", "v")
	for _, msg := range []*message.Message{nulName, badName, badHeader} {
		require.NoError(t, h.Handle(ctx, "billing", msg), "the dead letter is written and the delivery acknowledged")
	}

	dls := b.client.DeadLetter.Query().Order(deadletter.ByID()).AllX(ctx)
	require.Len(t, dls, 3)
	const note = `; stored escaped (NUL and bytes that are not UTF-8 as \xNN, backslash as \\): `
	assert.Equal(t, `order.\x00paid`, dls[0].EventName)
	assert.Equal(t, `unknown event "order.\x00paid" (version 2): this code declares no such event`+note+"event_name", dls[0].Reason)
	assert.Equal(t, `order.\xffpaid`, dls[1].EventName)
	assert.Equal(t, []byte("\x00\xff not JSON"), dls[1].Payload, "the payload is bytea: kept as received")

	assert.Equal(t, "order.paid", dls[2].EventName)
	assert.Equal(t, `3\xfe`, dls[2].AggregateID)
	assert.JSONEq(t, `{"trace": "a\\x00b\\xff\\\\c", "k\\x00": "v"}`, string(dls[2].Headers))
	assert.Equal(t, `refused \x00 order 3\xfe`+note+`aggregate_id, header "k\x00", header "trace", reason`, dls[2].Reason)
	assert.Equal(t, 1, dls[2].Attempts)
}

// An event set aside as a dead letter is redelivered by the broker (the
// ack was lost): it is acknowledged without running its attempts again,
// and its dead letter stays the only one.
func TestRedeliveredDeadLetterIsSkippedThroughTheBroker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br := openNATS(t)
	prefix := uniquePrefix()
	deleteStreamAfter(t, prefix+"orders")
	var calls, deliveries atomic.Int64
	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithTopicPrefix(prefix), consumer.WithMaxAttempts(3))...)
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		calls.Add(1)
		return errors.New("ledger closed")
	})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware(func(next message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := next(msg)
			if err == nil && deliveries.Add(1) < 4 {
				return nil, errors.New("lost the ack") // nacked: the broker delivers again
			}
			return out, err
		}
	})
	require.NoError(t, h.AddToRouter(router, br.Subscriber))
	runRouter(t, router)

	msg := outboxtest.Message(t, testent.OrderPaid{OrderID: 8, AmountCents: 5}, "8")
	require.NoError(t, br.Publisher().Publish(prefix+"orders", msg))
	require.Eventually(t, func() bool { return deliveries.Load() >= 4 }, patience, 10*time.Millisecond)
	require.Equal(t, int64(3), calls.Load(), "the attempts ran on the first delivery only")
	require.Equal(t, 1, b.client.DeadLetter.Query().CountX(context.Background()))
}

// Deliveries of one event giving up at the same instant (a broker
// redelivering a message still being handled) write one dead letter.
func TestConcurrentGiveUpsWriteOneDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	drv := entsql.OpenDB(dialect.Postgres, b.db.DB)
	const rounds, racers = 5, 12
	for range rounds {
		d := consumer.DeadLetter{
			Meta:   events.Meta{EventID: uuid.New(), Consumer: "billing", Name: "order.paid", Version: 2},
			Reason: "ledger closed", Attempts: 1,
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				assert.NoError(t, consumer.InsertDeadLetter(ctx, drv, "outbox_dead_letters", d))
			}()
		}
		close(start)
		wg.Wait()
	}
	require.Equal(t, rounds, b.client.DeadLetter.Query().CountX(ctx), "one dead letter per event")
}

// openNATSAt opens the broker at rawURL (for its options) until the test ends.
func openNATSAt(t *testing.T, rawURL string) broker.Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	br, err := broker.Open(ctx, rawURL, broker.Options{})
	if err != nil {
		pgtest.Unavailable(t, "NATS JetStream at "+rawURL, err)
	}
	t.Cleanup(func() { _ = br.Close() })
	return br
}

// deleteStreamAfter deletes the stream capturing subject when the test ends.
func deleteStreamAfter(t *testing.T, subject string) {
	t.Cleanup(func() {
		nc, err := nats.Connect("nats://127.0.0.1:4222")
		if err != nil {
			return
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if name, err := js.StreamNameBySubject(ctx, subject); err == nil {
			_ = js.DeleteStream(ctx, name)
		}
	})
}

// countDeliveries counts the deliveries r's handlers get.
func countDeliveries(r *message.Router, n *atomic.Int64) {
	r.AddMiddleware(func(next message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			n.Add(1)
			return next(msg)
		}
	})
}

// A producer sends a NATS message with a header key twice (NATS allows
// it; Watermill's unmarshaler refuses it, and the message was neither
// acked nor nacked, coming back every ack wait for ever). It reaches the
// dead letters with the reason, once, and is acknowledged.
func TestRepeatedNATSHeaderIsDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br := openNATS(t)
	prefix := uniquePrefix()
	deleteStreamAfter(t, prefix+"orders")
	var calls, deliveries atomic.Int64
	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithTopicPrefix(prefix))...)
	h.OnOrderPaid("billing", invoiceHandler(&calls))
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	countDeliveries(router, &deliveries)
	require.NoError(t, h.AddToRouter(router, br.Subscriber))
	runRouter(t, router)

	msg := outboxtest.Message(t, testent.OrderPaid{OrderID: 9, AmountCents: 5}, "9")
	nm := nats.NewMsg(prefix + "orders")
	nm.Data = msg.Payload
	nm.Header.Set("_watermill_message_uuid", msg.UUID)
	for k, v := range msg.Metadata {
		nm.Header.Set(k, v)
	}
	nm.Header.Add("trace", "t-1")
	nm.Header.Add("trace", "t-2")
	nc, err := nats.Connect("nats://127.0.0.1:4222")
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = js.PublishMsg(ctx, nm)
	require.NoError(t, err)

	require.Eventually(t, func() bool { return b.client.DeadLetter.Query().CountX(ctx) == 1 }, patience, 20*time.Millisecond)
	dl := b.client.DeadLetter.Query().OnlyX(ctx)
	require.Equal(t, msg.UUID, dl.EventID.String())
	require.Equal(t, `malformed message: NATS header repeated, one value per key expected: "trace" 2 times (values ["t-1" "t-2"]); the first value of each is kept`, dl.Reason)
	require.JSONEq(t, `{"trace": "t-1"}`, string(dl.Headers))
	require.Zero(t, calls.Load())
	time.Sleep(3 * time.Second) // past ack_wait (2 s): an unacked message would be back
	require.Equal(t, int64(1), deliveries.Load(), "acknowledged")
	require.Equal(t, 1, b.client.DeadLetter.Query().CountX(ctx))
}

// With a short ack_wait and a slow handler, only max_ack_pending messages
// are pushed ahead of the handler, so none waits past its ack wait: each
// event is delivered about once. With JetStream's default (1,000 pushed,
// handled one at a time) the later ones came back while still waiting,
// again and again.
func TestShortAckWaitDoesNotStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: handles for 5 s against a 2 s ack wait")
	}
	t.Parallel()
	b := setup(t)
	br := openNATSAt(t, natsURL+"&max_ack_pending=4")
	prefix := uniquePrefix()
	deleteStreamAfter(t, prefix+"orders")
	const n, handling = 40, 120 * time.Millisecond // 4.8 s of handling against a 2 s ack wait
	for i := range n {
		msg := outboxtest.Message(t, testent.OrderPaid{OrderID: int64(100 + i), AmountCents: 5}, "a")
		require.NoError(t, br.Publisher().Publish(prefix+"orders", msg))
	}
	var calls, deliveries atomic.Int64
	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithTopicPrefix(prefix))...)
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		time.Sleep(handling)
		return invoiceHandler(&calls)(ctx, tx, e, m)
	})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	countDeliveries(router, &deliveries)
	require.NoError(t, h.AddToRouter(router, br.Subscriber))
	runRouter(t, router)

	require.Eventually(t, func() bool { return b.invoices(t, "billing") == n }, patience, 50*time.Millisecond)
	time.Sleep(3 * time.Second) // past ack_wait: late redeliveries arrive
	require.LessOrEqual(t, deliveries.Load(), int64(n+n/10), "deliveries stay close to the number of events")
	require.Equal(t, int64(n), calls.Load())
}
