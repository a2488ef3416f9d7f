package consumer_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/outboxtest"
)

// countingLogger counts the retries a handler set logs, so a test can tell
// a delivery acknowledged on its first try from one that burnt its attempts.
type countingLogger struct {
	watermill.NopLogger
	retries atomic.Int64
}

func (l *countingLogger) Info(msg string, fields watermill.LogFields) {
	if msg == "Handler failed, retrying" {
		l.retries.Add(1)
	}
}

func (l *countingLogger) With(watermill.LogFields) watermill.LoggerAdapter { return l }

// The commit of the handler's transaction fails once, after the handler
// wrote its effect (as when the connection drops at commit). The effect
// must go with the dedupe record: the retry writes it once. An effect
// committed in a transaction of its own would be there twice.
func TestEffectAndDedupeRecordCommitTogether(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// A deferred trigger fails the first commit that carries a dedupe record;
	// the sequence counts across rollbacks.
	_, err := b.db.DB.Exec(`
		CREATE SEQUENCE dedupe_commits;
		CREATE FUNCTION fail_first_dedupe_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF nextval('dedupe_commits') = 1 THEN
				RAISE EXCEPTION 'commit failed on purpose';
			END IF;
			RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER fail_first_dedupe_commit AFTER INSERT ON outbox_processed_events
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fail_first_dedupe_commit();`)
	require.NoError(t, err)

	var calls atomic.Int64
	h := testent.NewOutboxHandlers(b.client, fast()...)
	h.OnOrderPaid("billing", invoiceHandler(&calls))
	msg := outboxtest.Message(t, testent.OrderPaid{OrderID: 41, AmountCents: 5}, "41")
	require.NoError(t, h.Handle(ctx, "billing", msg))
	require.Equal(t, int64(2), calls.Load(), "the failed commit is retried")
	require.Equal(t, 1, b.invoices(t, "billing"), "one effect: the first one rolled back with its dedupe record")
	require.Equal(t, 2, b.client.ProcessedEvent.Query().OnlyX(ctx).Attempts)
	require.Zero(t, b.client.DeadLetter.Query().CountX(ctx))

	require.NoError(t, h.Handle(ctx, "billing", msg.Copy()), "a redelivery is skipped")
	require.Equal(t, int64(2), calls.Load())
	require.Equal(t, 1, b.invoices(t, "billing"))
}

// A duplicate is acknowledged on its first try without calling the
// handler: it is not retried and never reaches the dead letters, whether
// it comes after the first delivery or at the same time.
func TestDuplicateDeliveriesLeaveNoDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	log := &countingLogger{}
	var calls atomic.Int64
	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithMaxAttempts(3), consumer.WithLogger(log))...)
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		if e.OrderID > 100 {
			time.Sleep(50 * time.Millisecond) // hold the record's lock while the twins arrive
		}
		return invoiceHandler(&calls)(ctx, tx, e, m)
	})

	sequential := outboxtest.Message(t, testent.OrderPaid{OrderID: 1, AmountCents: 5}, "1")
	for range 4 {
		require.NoError(t, h.Handle(ctx, "billing", sequential.Copy()))
	}

	concurrent := outboxtest.Message(t, testent.OrderPaid{OrderID: 101, AmountCents: 5}, "101")
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			assert.NoError(t, h.Handle(ctx, "billing", concurrent.Copy()))
		}()
	}
	wg.Wait()

	require.Equal(t, int64(2), calls.Load(), "the handler ran once per event")
	require.Equal(t, 2, b.invoices(t, "billing"))
	require.Zero(t, log.retries.Load(), "no delivery was retried")
	require.Zero(t, b.client.DeadLetter.Query().CountX(ctx), "duplicates are not dead letters")
	for _, pe := range b.client.ProcessedEvent.Query().AllX(ctx) {
		require.Equal(t, 1, pe.Attempts, "event %s", pe.EventID)
	}
}

// A poison message whose dead letter cannot be written is nacked, not
// acknowledged: it comes again, and once the table is back it lands there.
func TestUnwritableDeadLetterNacksTheMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hide := func() {
		_, err := b.db.DB.Exec(`ALTER TABLE outbox_dead_letters RENAME TO outbox_dead_letters_hidden`)
		require.NoError(t, err)
	}
	restore := func() {
		_, err := b.db.DB.Exec(`ALTER TABLE outbox_dead_letters_hidden RENAME TO outbox_dead_letters`)
		require.NoError(t, err)
	}
	var calls atomic.Int64
	logs := &captureLogger{}
	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithMaxAttempts(2), consumer.WithLogger(logs))...)
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		calls.Add(1)
		return errors.New("ledger closed")
	})

	// Called directly: an error, which a router turns into a nack.
	hide()
	direct := outboxtest.Message(t, testent.OrderPaid{OrderID: 51, AmountCents: 5}, "51")
	require.Error(t, h.Handle(ctx, "billing", direct.Copy()), "the handler failed and so did the dead letter")
	newer := outboxtest.Message(t, testent.OrderPaid{OrderID: 52, AmountCents: 5}, "52")
	newer.Metadata.Set(events.MetaEventVersion, "9")
	require.Error(t, h.Handle(ctx, "billing", newer.Copy()), "a message given up on at once")
	restore()
	require.Zero(t, b.client.DeadLetter.Query().CountX(ctx))
	require.NoError(t, h.Handle(ctx, "billing", direct.Copy()))
	require.NoError(t, h.Handle(ctx, "billing", newer.Copy()))
	require.Equal(t, 2, b.client.DeadLetter.Query().CountX(ctx))

	// Through a router: the nacked message is delivered again until its
	// dead letter is written, then acknowledged.
	pubsub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 10}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	var deliveries, nacks atomic.Int64
	router.AddMiddleware(func(next message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			deliveries.Add(1)
			out, err := next(msg)
			if err != nil {
				nacks.Add(1)
			}
			return out, err
		}
	})
	require.NoError(t, h.AddToRouter(router, func(string) (message.Subscriber, error) { return pubsub, nil }))
	runRouter(t, router)

	hide()
	routed := outboxtest.Message(t, testent.OrderPaid{OrderID: 53, AmountCents: 5}, "53")
	require.NoError(t, pubsub.Publish("orders", routed))
	require.Eventually(t, func() bool { return nacks.Load() >= 3 }, patience, 5*time.Millisecond, "redelivered after each nack")
	restore()
	require.Eventually(t, func() bool {
		return b.client.DeadLetter.Query().CountX(ctx) == 3
	}, patience, 10*time.Millisecond, "the redelivered message reaches the dead letters")
	seen := deliveries.Load()
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, seen, deliveries.Load(), "acknowledged once its dead letter is written")
	require.Equal(t, seen-1, nacks.Load(), "every delivery but the last was nacked")

	// Each dead letter is logged once, when it is written: not once per
	// failed try to write it.
	logs.mu.Lock()
	defer logs.mu.Unlock()
	letters := map[any]int{}
	for _, m := range logs.msgs {
		if m.Msg == consumer.DeadLetteredLog {
			letters[m.Fields["event_id"]]++
		}
	}
	require.Equal(t, map[any]int{direct.UUID: 1, newer.UUID: 1, routed.UUID: 1}, letters)
}

// Each automatic step of the upcast path fills the defaults of the version
// it steps to: a version 1 payload, which predates currencies, is in
// version 2's default currency, not in the one version 3 defaults to.
func TestUpcastFillsTheDefaultsOfEachStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	got := map[string]testent.PriceChanged{}
	h := testent.NewOutboxHandlers(b.client, fast()...)
	h.OnPriceChanged("catalog", func(ctx context.Context, tx *testent.Tx, e *testent.PriceChanged, m events.Meta) error {
		got[e.Sku] = *e
		return nil
	})
	v1 := outboxtest.Message(t, testent.PriceChangedV1{Sku: "old", Cents: 250}, "old")
	require.JSONEq(t, `{"sku": "old", "cents": 250}`, string(v1.Payload), "version 1 has no currency")
	require.NoError(t, h.Handle(ctx, "catalog", v1))
	v3 := outboxtest.Message(t, testent.PriceChanged{Sku: "new", Amount: 2.5}, "new")
	v3.Payload = []byte(`{"sku": "new", "amount": 2.5}`)
	require.NoError(t, h.Handle(ctx, "catalog", v3))

	require.Zero(t, b.client.DeadLetter.Query().CountX(ctx))
	require.Equal(t, map[string]testent.PriceChanged{
		"old": {Sku: "old", Amount: 2.5, Currency: "EUR"},
		"new": {Sku: "new", Amount: 2.5, Currency: "USD"},
	}, got)
}

// failingPublisher fails its first publishes, then hands on to next.
type failingPublisher struct {
	message.Publisher
	failures atomic.Int64
}

func (p *failingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.failures.Add(-1) >= 0 {
		return errors.New("broker unreachable")
	}
	return p.Publisher.Publish(topic, msgs...)
}

// The dead letter's broker topic refuses the first publish: the message is
// nacked and comes again, and the redelivery does not store the dead
// letter a second time.
func TestDeadLetterIsStoredOnceWhenItsTopicFailsFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubsub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 10, Persistent: true}, watermill.NopLogger{})
	dead, err := pubsub.Subscribe(ctx, "dead-letters")
	require.NoError(t, err)
	pub := &failingPublisher{Publisher: pubsub}
	pub.failures.Store(1)

	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithMaxAttempts(2),
		consumer.WithDeadLetterTopic(pub, "dead-letters"))...)
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		return errors.New("ledger closed")
	})
	msg := outboxtest.Message(t, testent.OrderPaid{OrderID: 61, AmountCents: 5}, "61")
	require.Error(t, h.Handle(ctx, "billing", msg.Copy()), "nacked: the dead letter did not reach its topic")
	require.NoError(t, h.Handle(ctx, "billing", msg.Copy()))

	select {
	case got := <-dead:
		require.Equal(t, msg.UUID, got.UUID)
		got.Ack()
	case <-time.After(patience):
		t.Fatal("no dead letter on the topic")
	}
	require.Equal(t, 1, b.client.DeadLetter.Query().CountX(ctx), "one dead letter in the table")
}
