package admin_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/admin"
	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/ent"
	"github.com/entoutbox/entoutbox/ent/deadletter"
	outboxrow "github.com/entoutbox/entoutbox/ent/outbox"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/mysqltest"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/internal/testent/invoice"
	"github.com/entoutbox/entoutbox/relay"
)

// patience bounds each wait for what a broker, a relay or PostgreSQL will
// do (a delivery, a dead letter, a start or stop): a liveness bound, not a
// speed limit. A passing test waits only as long as the work takes; on a
// loaded 2-core machine that is ten times as long as on an idle one.
const patience = 3 * time.Minute

// The broker of most tests; brokers_test.go runs retry and replay on each.
const amqpURL = "amqp://guest:guest@127.0.0.1:5672/"

// env is one test's outbox: its own schema, topic prefix and broker.
type env struct {
	db     *pgtest.DB      // on PostgreSQL
	sql    *sql.DB         // the database, whichever it is
	client *testent.Client // the application's, with the handlers
	admin  *admin.Admin
	ent    *ent.Client
	broker broker.Broker
	prefix string
}

func setup(t *testing.T, withBroker bool) *env {
	t.Helper()
	if !withBroker {
		return setupOn(t, "", "")
	}
	return setupOn(t, amqpURL, "RabbitMQ at 127.0.0.1:5672")
}

// setupOn is setup with the broker at url ("" for none); service names it
// when it is not reachable ("" when it runs in process).
func setupOn(t *testing.T, url, service string) *env {
	t.Helper()
	db := pgtest.New(t)
	e := &env{db: db, client: testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))}
	pgtest.Migrate(t, e.client.Schema.Create)
	return e.opened(t, db.DB, dialect.Postgres, url, service)
}

// setupMySQL is setup on a MariaDB (or MySQL) database of the test's own.
func setupMySQL(t *testing.T, withBroker bool) *env {
	t.Helper()
	db, _ := mysqltest.Open(t)
	e := &env{client: testent.NewClient(testent.Driver(entsql.OpenDB(dialect.MySQL, db)))}
	require.NoError(t, e.client.Schema.Create(context.Background()))
	if !withBroker {
		return e.opened(t, db, dialect.MySQL, "", "")
	}
	return e.opened(t, db, dialect.MySQL, amqpURL, "RabbitMQ at 127.0.0.1:5672")
}

// onPostgresAndMariaDB runs test on each database the repairs run on.
func onPostgresAndMariaDB(t *testing.T, withBroker bool, test func(t *testing.T, e *env)) {
	for name, setup := range map[string]func(*testing.T, bool) *env{"PostgreSQL": setup, "MariaDB": setupMySQL} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, setup(t, withBroker))
		})
	}
}

// opened is e, migrated on db (of ent's dialect d), with its Admin and
// the broker at url ("" for none; service names it).
func (e *env) opened(t *testing.T, db *sql.DB, d, url, service string) *env {
	t.Helper()
	e.sql = db
	e.ent = ent.NewClient(ent.Driver(entsql.OpenDB(d, db)))
	a, err := admin.Open(db, admin.Tables{})
	require.NoError(t, err)
	e.admin = a
	if url != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		br, err := broker.Open(ctx, url, broker.Options{})
		if err != nil && service != "" {
			pgtest.Unavailable(t, service, err)
		}
		require.NoError(t, err)
		t.Cleanup(func() { _ = br.Close() })
		e.broker = br
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		e.prefix = "t" + hex.EncodeToString(b) + "_"
	}
	return e
}

// consume runs h's consumers until the test ends; their queues exist when
// it returns.
func (e *env) consume(t *testing.T, h *testent.OutboxHandlers) {
	t.Helper()
	r, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	require.NoError(t, h.AddToRouter(r, e.broker.Subscriber))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-r.Running():
	case err := <-done:
		t.Fatalf("router stopped: %v", err)
	case <-time.After(patience):
		t.Fatal("router did not start")
	}
}

// relay runs a fast relay publishing to pub until the test ends.
func (e *env) relay(t *testing.T, pub message.Publisher) {
	t.Helper()
	r, err := relay.New(relay.Config{DB: e.sql, Publisher: pub, TopicPrefix: e.prefix,
		MaxAttempts: 1, PollInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func (e *env) emit(t *testing.T, aggregate string, p testent.OrderPaid) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	var id uuid.UUID
	require.NoError(t, e.client.WithTx(ctx, func(tx *testent.Tx) error {
		return tx.Outbox.EmitOrderPaid(ctx, aggregate, p, events.ReturnEventID(&id))
	}))
	return id
}

func (e *env) invoices(consumerName string) int {
	return e.client.Invoice.Query().Where(invoice.Consumer(consumerName)).CountX(context.Background())
}

func (e *env) letter(t *testing.T, source string) *ent.DeadLetter {
	t.Helper()
	var d *ent.DeadLetter
	require.Eventually(t, func() bool {
		ds, err := e.ent.DeadLetter.Query().Where(deadletter.Source(source)).All(context.Background())
		require.NoError(t, err)
		if len(ds) == 1 {
			d = ds[0]
		}
		return d != nil
	}, patience, 20*time.Millisecond, "no dead letter from %s", source)
	return d
}

func (e *env) deliveredOnce(t *testing.T, id uuid.UUID) {
	t.Helper()
	require.Eventually(t, func() bool {
		rows := e.ent.Outbox.Query().Where(outboxrow.EventID(id)).AllX(context.Background())
		require.LessOrEqual(t, len(rows), 1, "one outbox row per event id")
		return len(rows) == 1 && rows[0].DeliveredAt != nil
	}, patience, 20*time.Millisecond)
}

// consumeInvoices runs billing, failing while broken (at first), and
// audit, each writing an invoice per event and counting its calls,
// dead-lettering after two attempts.
func (e *env) consumeInvoices(t *testing.T) (billing, audit *atomic.Int64, broken *atomic.Bool) {
	billing, audit, broken = new(atomic.Int64), new(atomic.Int64), new(atomic.Bool)
	broken.Store(true)
	h := testent.NewOutboxHandlers(e.client, consumer.WithTopicPrefix(e.prefix), consumer.WithMaxAttempts(2),
		consumer.WithBackoff(5*time.Millisecond, 10*time.Millisecond))
	h.OnOrderPaid("billing", invoiceHandler(billing, broken))
	h.OnOrderPaid("audit", invoiceHandler(audit, nil))
	e.consume(t, h)
	return billing, audit, broken
}

// failingRelay runs a relay whose publishes fail while broken (at first).
func (e *env) failingRelay(t *testing.T) (broken *atomic.Bool) {
	broken = new(atomic.Bool)
	broken.Store(true)
	e.relay(t, failingPublisher{e.broker.Publisher(), broken})
	return broken
}

// retryRelayLetter retries the relay's letter d of event id, which it
// rebuilds into the outbox, and waits until the event is delivered and ids
// got it.
func (e *env) retryRelayLetter(t *testing.T, d *ent.DeadLetter, id uuid.UUID, ids *eventIDs) {
	t.Helper()
	rs, err := e.admin.RetryMatching(context.Background(), admin.Filter{Source: "relay", Event: "order.paid"})
	require.NoError(t, err)
	require.Equal(t, []admin.Result{{Letter: d.ID, EventID: id, Source: "relay", Outcome: admin.Rebuilt}}, rs)
	e.deliveredOnce(t, id)
	require.Eventually(t, func() bool { return len(ids.get()) == 1 }, patience, 10*time.Millisecond)
}

// eventIDs are the ids of the events a consumer handled, in order.
type eventIDs struct {
	mu  sync.Mutex
	ids []uuid.UUID
}

func (r *eventIDs) get() []uuid.UUID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ids)
}

// recordIDs consumes order.paid as consumerName, recording each event's id.
func (e *env) recordIDs(t *testing.T, consumerName string) *eventIDs {
	r := &eventIDs{}
	h := testent.NewOutboxHandlers(e.client, consumer.WithTopicPrefix(e.prefix))
	h.OnOrderPaid(consumerName, func(ctx context.Context, tx *testent.Tx, p *testent.OrderPaid, m events.Meta) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.ids = append(r.ids, m.EventID)
		return nil
	})
	e.consume(t, h)
	return r
}

// invoiceHandler writes one invoice per handled event, failing while broken.
func invoiceHandler(calls *atomic.Int64, broken *atomic.Bool) testent.OrderPaidHandler {
	return func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		calls.Add(1)
		if broken != nil && broken.Load() {
			return errors.New("the billing code has a bug")
		}
		return tx.Invoice.Create().SetOrderID(e.OrderID).SetAmountCents(e.AmountCents).
			SetCurrency(e.Currency).SetConsumer(m.Consumer).Exec(ctx)
	}
}

// A poison event is dead-lettered by one consumer, the bug is fixed and
// the letter retried: that consumer's effect happens once, the other
// consumer's is not repeated, and a second retry changes nothing.
func TestRetryConsumerDeadLetterDeliversOnce(t *testing.T) {
	t.Parallel()
	// The outbox row retained, and removed (--delete-delivered, retention):
	// then the event is rebuilt from the dead letter.
	onPostgresAndMariaDB(t, true, func(t *testing.T, e *env) { retryConsumerDeadLetter(t, e, false) })
	t.Run("removed", func(t *testing.T) { t.Parallel(); retryConsumerDeadLetter(t, setup(t, true), true) })
}

func retryConsumerDeadLetter(t *testing.T, e *env, removed bool) {
	ctx := context.Background()
	billingCalls, auditCalls, broken := e.consumeInvoices(t)
	e.relay(t, e.broker.Publisher())

	id := e.emit(t, "1", testent.OrderPaid{OrderID: 1, AmountCents: 100})
	d := e.letter(t, "billing")
	require.Equal(t, id, d.EventID)
	require.Contains(t, d.Reason, "the billing code has a bug")
	require.Eventually(t, func() bool { return e.invoices("audit") == 1 }, patience, 10*time.Millisecond)
	require.Equal(t, 0, e.invoices("billing"))

	// The relay marks the row delivered after the broker's ack, which may
	// come after the consumers handled the event; retried before that, the
	// letter is rightly "already pending".
	e.deliveredOnce(t, id)
	want := admin.Requeued
	if removed {
		require.Equal(t, 1, e.ent.Outbox.Delete().ExecX(ctx))
		want = admin.Rebuilt
	}
	broken.Store(false) // the fix is deployed
	billingBefore := billingCalls.Load()
	rs, err := e.admin.Retry(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, []admin.Result{{Letter: d.ID, EventID: id, Source: "billing", Outcome: want}}, rs)
	require.Eventually(t, func() bool { return e.invoices("billing") == 1 }, patience, 10*time.Millisecond)
	e.deliveredOnce(t, id)

	// Retrying again does nothing: the letter is marked, and kept.
	rs, err = e.admin.Retry(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, admin.Skipped, rs[0].Outcome)
	require.Contains(t, rs[0].Why, "already retried at")
	rs, err = e.admin.RetryMatching(ctx, admin.Filter{Source: "billing"})
	require.NoError(t, err)
	require.Empty(t, rs)
	got, err := e.admin.DeadLetterByID(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, admin.StateRetried, got.State())
	require.Equal(t, id, got.EventID)
	require.Equal(t, uuid.Nil, e.ent.DeadLetter.GetX(ctx, d.ID).EventID, "the consumer must not skip the retried event")

	time.Sleep(500 * time.Millisecond) // room for a second delivery, if any
	require.Equal(t, 1, e.invoices("billing"))
	require.Equal(t, billingBefore+1, billingCalls.Load(), "billing handled the retried event once")
	require.Equal(t, 1, e.invoices("audit"))
	require.Equal(t, int64(1), auditCalls.Load(), "audit skipped the retried event as a duplicate, before its handler")
	require.Equal(t, 1, e.ent.Outbox.Query().CountX(ctx))
}

// failingPublisher fails every publish while broken; it has no Ping, so
// the relay counts its first failure.
type failingPublisher struct {
	message.Publisher
	broken *atomic.Bool
}

func (p failingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.broken.Load() {
		return errors.New("broker refused it")
	}
	return p.Publisher.Publish(topic, msgs...)
}

// An event the relay gave up on, retried, goes out again with its
// original id, once.
func TestRetryRelayDeadLetterKeepsTheEventID(t *testing.T) {
	t.Parallel()
	e := setup(t, true)
	ctx := context.Background()
	ids := e.recordIDs(t, "billing")
	broken := e.failingRelay(t)

	id := e.emit(t, "7", testent.OrderPaid{OrderID: 7, AmountCents: 700})
	d := e.letter(t, "relay")
	require.Equal(t, id, d.EventID)
	require.Zero(t, e.ent.Outbox.Query().CountX(ctx), "the relay moved the row to the dead letters")

	broken.Store(false)
	e.retryRelayLetter(t, d, id, ids)
	rs, err := e.admin.Retry(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, admin.Skipped, rs[0].Outcome)
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, []uuid.UUID{id}, ids.get(), "delivered once, with its original id")
	require.Equal(t, 1, e.ent.Outbox.Query().CountX(ctx))
}

// addLetter writes a dead letter as a consumer would.
func (e *env) addLetter(t *testing.T, source, reason string, at time.Time) *ent.DeadLetter {
	t.Helper()
	d, err := e.ent.DeadLetter.Create().SetEventID(uuid.New()).SetSource(source).SetEventName("order.paid").
		SetEventVersion(2).SetTopic("orders").SetAggregateType("Order").SetAggregateID("9").
		SetPayload([]byte(`{"order_id":9,"amount_cents":5,"currency":"EUR"}`)).SetReason(reason).
		SetAttempts(5).SetCreatedAt(at).Save(context.Background())
	require.NoError(t, err)
	return d
}

// A discarded letter stays, marked with its note; it is not retried, the
// filters and states find it, and only purge removes settled letters.
func TestDiscardKeepsTheLetterMarked(t *testing.T) {
	t.Parallel()
	onPostgresAndMariaDB(t, false, discardKeepsTheLetterMarked)
}

func discardKeepsTheLetterMarked(t *testing.T, e *env) {
	ctx := context.Background()
	old := e.addLetter(t, "billing", "card declined", time.Now().Add(-48*time.Hour))
	recent := e.addLetter(t, "audit", "disk full", time.Now())

	_, err := e.admin.Discard(ctx, "", old.ID)
	require.Error(t, err, "a discard needs a note")
	rs, err := e.admin.Discard(ctx, "refunded by hand", old.ID, old.ID)
	require.NoError(t, err)
	require.Equal(t, admin.Discarded, rs[0].Outcome)
	require.Equal(t, admin.Skipped, rs[1].Outcome)
	_, err = e.admin.Discard(ctx, "x", 999999)
	require.ErrorIs(t, err, admin.ErrNotFound)

	got, err := e.admin.DeadLetterByID(ctx, old.ID)
	require.NoError(t, err)
	require.Equal(t, admin.StateDiscarded, got.State())
	require.Equal(t, "refunded by hand", got.DiscardNote)
	require.Equal(t, old.EventID, e.ent.DeadLetter.GetX(ctx, old.ID).EventID, "its consumer keeps skipping the event")
	require.Equal(t, old.Payload, got.Payload)

	rs, err = e.admin.Retry(ctx, old.ID)
	require.NoError(t, err)
	require.Equal(t, admin.Skipped, rs[0].Outcome)
	require.Zero(t, e.ent.Outbox.Query().CountX(ctx), "a discarded letter is not retried")

	list := func(f admin.Filter) []int64 {
		ds, err := e.admin.ListDeadLetters(ctx, f)
		require.NoError(t, err)
		var ids []int64
		for _, d := range ds {
			ids = append(ids, d.ID)
		}
		return ids
	}
	require.Equal(t, []int64{recent.ID, old.ID}, list(admin.Filter{}))
	require.Equal(t, []int64{old.ID}, list(admin.Filter{State: admin.StateDiscarded}))
	require.Equal(t, []int64{recent.ID}, list(admin.Filter{State: admin.StateOpen}))
	require.Equal(t, []int64{recent.ID}, list(admin.Filter{Source: "audit"}))
	require.Equal(t, []int64{old.ID}, list(admin.Filter{Reason: "declined"}))
	require.Equal(t, []int64{old.ID}, list(admin.Filter{Until: time.Now().Add(-time.Hour)}))
	require.Equal(t, []int64{recent.ID}, list(admin.Filter{Since: time.Now().Add(-time.Hour)}))

	// Purge keeps open letters and recently settled ones.
	n, err := e.admin.PurgeSettled(ctx, time.Hour, 10)
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = e.admin.PurgeSettled(ctx, 0, 10)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.Equal(t, []int64{recent.ID}, list(admin.Filter{}))
}

// Replayed events reach a fresh consumer with their ids, per aggregate in
// order, within the range asked; the consumer that handled them skips them.
func TestReplayReachesAFreshConsumerInOrder(t *testing.T) {
	t.Parallel()
	e := setup(t, true)
	ctx := context.Background()
	var oldCalls atomic.Int64
	old := testent.NewOutboxHandlers(e.client, consumer.WithTopicPrefix(e.prefix))
	old.OnOrderPaid("billing", invoiceHandler(&oldCalls, nil))
	e.consume(t, old)
	e.relay(t, e.broker.Publisher())

	var want []uuid.UUID
	perAggregate := map[string][]int64{}
	for i := 1; i <= 12; i++ {
		agg := strconv.Itoa(i % 3)
		want = append(want, e.emit(t, agg, testent.OrderPaid{OrderID: int64(i), AmountCents: 1}))
		perAggregate[agg] = append(perAggregate[agg], int64(i))
	}
	outside := e.emit(t, "0", testent.OrderPaid{OrderID: 99, AmountCents: 1})
	for _, id := range append(want, outside) {
		e.deliveredOnce(t, id)
	}
	require.Eventually(t, func() bool { return oldCalls.Load() == 13 }, patience, 10*time.Millisecond)
	_, err := e.db.DB.Exec(`UPDATE outbox_events SET created_at = now() - interval '2 days' WHERE event_id = $1`, outside)
	require.NoError(t, err)

	var (
		mu    sync.Mutex
		got   []uuid.UUID
		order = map[string][]int64{}
	)
	fresh := testent.NewOutboxHandlers(e.client, consumer.WithTopicPrefix(e.prefix))
	fresh.OnOrderPaid("read-model", func(ctx context.Context, tx *testent.Tx, p *testent.OrderPaid, m events.Meta) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, m.EventID)
		order[m.AggregateID] = append(order[m.AggregateID], p.OrderID)
		return nil
	})
	e.consume(t, fresh)

	n, err := e.admin.Replay(ctx, e.broker.Publisher(), admin.Range{Events: []string{"order.paid"},
		Since: time.Now().Add(-time.Hour)}, admin.ReplayOptions{TopicPrefix: e.prefix, BatchSize: 5})
	require.NoError(t, err)
	require.Equal(t, 12, n)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 12 }, patience, 10*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	require.ElementsMatch(t, want, got, "their original ids, and not the one written before --since")
	require.Equal(t, perAggregate, order, "per aggregate in order")
	mu.Unlock()
	require.Equal(t, int64(13), oldCalls.Load(), "the consumer that handled them skips them")
	require.Equal(t, 13, e.invoices("billing"))

	// One aggregate only.
	n, err = e.admin.Replay(ctx, e.broker.Publisher(), admin.Range{Events: []string{"order.paid"}, AggregateID: "1"},
		admin.ReplayOptions{TopicPrefix: e.prefix})
	require.NoError(t, err)
	require.Equal(t, len(perAggregate["1"]), n)
}

// Two consumers' letters of one event, retried, write its outbox row once;
// and retries of one letter at the same time retry it once.
func TestRetryWritesTheEventOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, false)
	ctx := context.Background()
	id := e.emit(t, "3", testent.OrderPaid{OrderID: 3, AmountCents: 300})
	_, err := e.db.DB.Exec(`UPDATE outbox_events SET delivered_at = now()`)
	require.NoError(t, err)
	var letters []*ent.DeadLetter
	for _, source := range []string{"billing", "audit"} {
		d := e.addLetter(t, source, "bug", time.Now())
		letters = append(letters, e.ent.DeadLetter.UpdateOne(d).SetEventID(id).SaveX(ctx))
	}

	var wg sync.WaitGroup
	results := make(chan admin.Result, 16)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs, err := e.admin.Retry(ctx, letters[0].ID)
			if assert.NoError(t, err) {
				results <- rs[0]
			}
		}()
	}
	wg.Wait()
	close(results)
	var done int
	for r := range results {
		if r.Outcome != admin.Skipped {
			require.Equal(t, admin.Requeued, r.Outcome)
			done++
		}
	}
	require.Equal(t, 1, done, "one of the concurrent retries did it")
	row := e.ent.Outbox.Query().Where(outboxrow.EventID(id)).OnlyX(ctx)
	require.Nil(t, row.DeliveredAt)

	rs, err := e.admin.Retry(ctx, letters[1].ID)
	require.NoError(t, err)
	require.Equal(t, admin.AlreadyPending, rs[0].Outcome)
	again := e.ent.Outbox.Query().Where(outboxrow.EventID(id)).OnlyX(ctx)
	require.Equal(t, row.ID, again.ID, "the pending row is left to the relay, not written again")
	for _, d := range letters {
		got, err := e.admin.DeadLetterByID(ctx, d.ID)
		require.NoError(t, err)
		require.Equal(t, admin.StateRetried, got.State())
	}
}

// A replayed event carries what the relay would have sent, the version its
// older consumers can read as included (rolling deploys).
func TestReplayMessageKeepsReadableFrom(t *testing.T) {
	t.Parallel()
	e := setup(t, false)
	ctx := context.Background()
	// Seq 7 as its producer numbered it: the counter is there already.
	_, err := e.db.DB.Exec(`INSERT INTO outbox_aggregate_sequences (topic, aggregate_type, aggregate_id, last_seq)
		VALUES ('orders', 'Order', 'a', 7);
		INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type,
		aggregate_id, payload, headers, readable_from, aggregate_seq, delivered_at) VALUES
		(gen_random_uuid(), 'order.paid', 3, 'orders', 'Order', 'a', '{"n": 1}', '{"trace": "t1"}', 2, 7, now()),
		(gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', 'b', '{}', NULL, NULL, NULL, now())`)
	require.NoError(t, err)
	var pub recorder
	n, err := e.admin.Replay(ctx, &pub, admin.Range{Events: []string{"order.paid"}}, admin.ReplayOptions{})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Len(t, pub.msgs, 2)
	first := pub.msgs[0].Metadata
	require.Equal(t, "2", first.Get(events.MetaReadableFrom))
	require.Equal(t, "t1", first.Get("trace"))
	require.Equal(t, "7", first.Get(events.MetaAggregateSeq))
	require.JSONEq(t, `{"n": 1}`, string(pub.msgs[0].Payload))
	require.Empty(t, pub.msgs[1].Metadata.Get(events.MetaReadableFrom))

}

// recorder is a publisher that keeps what it is given.
type recorder struct{ msgs []*message.Message }

func (r *recorder) Publish(_ string, msgs ...*message.Message) error {
	r.msgs = append(r.msgs, msgs...)
	return nil
}

func (r *recorder) Close() error { return nil }

// Replay sends delivered events only: rows still pending, interleaved with
// delivered ones of the same event, are the relay's and never replayed;
// with a WAL relay's progress recorded, the rows it delivered (delivered_at
// NULL) are replayed, and those it did not, before or after, are not.
func TestReplaySendsDeliveredEventsOnly(t *testing.T) {
	t.Parallel()
	e := setup(t, true)
	ctx := context.Background()
	topic := e.prefix + "orders"
	sub, err := e.broker.Subscriber("replay-check")
	require.NoError(t, err)
	subCtx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	msgs, err := sub.Subscribe(subCtx, topic) // declares the queue: it gets what is published from now on
	require.NoError(t, err)
	var (
		mu  sync.Mutex
		got []uuid.UUID
	)
	go func() {
		for m := range msgs {
			mu.Lock()
			got = append(got, uuid.MustParse(m.UUID))
			mu.Unlock()
			m.Ack()
		}
	}()
	// received waits for n messages, then a little for any more, and
	// returns them all.
	received := func(n int) []uuid.UUID {
		require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= n },
			patience, 10*time.Millisecond, "the broker received fewer than %d replayed events", n)
		time.Sleep(500 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		out := got
		got = nil
		return out
	}
	insert := func(aggregate string, delivered bool) uuid.UUID {
		t.Helper()
		var id uuid.UUID
		require.NoError(t, e.db.DB.QueryRow(`INSERT INTO outbox_events (event_id, event_name, event_version, topic,
			aggregate_type, aggregate_id, payload, delivered_at) VALUES (gen_random_uuid(), 'order.paid', 2, 'orders',
			'Order', $1, '{"order_id":1,"amount_cents":1,"currency":"EUR"}', CASE WHEN $2 THEN now() END) RETURNING event_id`,
			aggregate, delivered).Scan(&id))
		return id
	}
	replay := func() int {
		t.Helper()
		n, err := e.admin.Replay(ctx, e.broker.Publisher(), admin.Range{Events: []string{"order.paid"}},
			admin.ReplayOptions{TopicPrefix: e.prefix, BatchSize: 2})
		require.NoError(t, err)
		return n
	}

	// Delivered by the fast or compatible path: delivered_at is set.
	var delivered []uuid.UUID
	for i := range 3 {
		agg := strconv.Itoa(i % 2)
		delivered = append(delivered, insert(agg, true))
		insert(agg, false) // pending, of the same aggregate, between them
	}
	require.Equal(t, len(delivered), replay(), "the delivered events only")
	require.ElementsMatch(t, delivered, received(len(delivered)), "the delivered events only, not the pending ones")

	// A WAL relay's progress: a row written after its slot's creation and
	// before the recorded delivered snapshot was delivered; the pending rows
	// above (visible at the slot's creation) and one written after were not.
	_, err = e.db.DB.Exec(`CREATE TABLE outbox_events_wal_progress (slot text PRIMARY KEY, created pg_snapshot,
		delivered pg_snapshot, confirmed_lsn pg_lsn, updated_at timestamptz NOT NULL DEFAULT now());
		INSERT INTO outbox_events_wal_progress (slot, created) VALUES ('replay_test', pg_current_snapshot())`)
	require.NoError(t, err)
	byWAL := insert("0", false)
	_, err = e.db.DB.Exec(`UPDATE outbox_events_wal_progress SET delivered = pg_current_snapshot()`)
	require.NoError(t, err)
	insert("0", false) // after the delivered snapshot: pending
	want := append([]uuid.UUID{byWAL}, delivered...)
	require.Equal(t, len(want), replay(), "the delivered events and the one the WAL path delivered only")
	require.ElementsMatch(t, want, received(len(want)), "the delivered events and the one the WAL path delivered, not the pending ones")
}

// A negative retention would put the cutoff in the future and delete every
// settled letter, however recent: PurgeSettled refuses it, naming it, and
// deletes nothing.
func TestPurgeSettledRefusesANegativeRetention(t *testing.T) {
	t.Parallel()
	e := setup(t, false)
	ctx := context.Background()
	discarded := e.addLetter(t, "billing", "card declined", time.Now())
	_, err := e.admin.Discard(ctx, "refunded by hand", discarded.ID)
	require.NoError(t, err)
	retried := e.addLetter(t, "audit", "disk full", time.Now())
	require.NoError(t, e.ent.DeadLetter.UpdateOne(retried).SetRetriedAt(time.Now()).Exec(ctx))
	e.addLetter(t, "audit", "disk full", time.Now())

	n, err := e.admin.PurgeSettled(ctx, -time.Hour, 10)
	require.EqualError(t, err, "admin: retention -1h0m0s must not be negative")
	require.Zero(t, n)
	require.Equal(t, 3, e.ent.DeadLetter.Query().CountX(ctx), "nothing deleted")
}
