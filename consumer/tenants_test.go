package consumer_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgschema"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/internal/testent/invoice"
)

// tenantHandler writes an event's effect as an invoice of its order whose
// amount is the event's seq and whose currency is the tenant the handler
// was given.
func tenantHandler(calls *atomic.Int64) testent.OrderPaidHandler {
	return func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		calls.Add(1)
		return tx.Invoice.Create().SetOrderID(e.OrderID).SetAmountCents(m.AggregateSeq).
			SetCurrency(m.Tenant).SetConsumer(m.Consumer).Exec(ctx)
	}
}

// tenantMessage is seqMessage relayed from tenant's database ("" for none).
func tenantMessage(t *testing.T, tenant string, order, seq int64) *message.Message {
	msg := seqMessage(t, order, seq)
	if tenant != "" {
		msg.Metadata.Set(events.MetaTenant, tenant)
	}
	return msg
}

// appliedIn lists, in commit order, the seqs of order applied in the
// database of client and the tenants they were applied for.
func appliedIn(t *testing.T, client *testent.Client, order int64) (seqs []int64, tenants []string) {
	t.Helper()
	seqs = []int64{}
	for _, inv := range client.Invoice.Query().Where(invoice.Consumer("billing"), invoice.OrderID(order)).
		Order(invoice.ByID()).AllX(context.Background()) {
		seqs = append(seqs, inv.AmountCents)
		tenants = append(tenants, inv.Currency)
	}
	return seqs, tenants
}

// tenantOpener opens the clients of clients by tenant name, counting the
// opens; a name it does not hold is unknown.
type tenantOpener struct {
	clients map[string]*testent.Client
	opens   sync.Map // tenant -> *atomic.Int64
}

func (o *tenantOpener) open(_ context.Context, tenant string) (*testent.Client, error) {
	n, _ := o.opens.LoadOrStore(tenant, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	client, ok := o.clients[tenant]
	if !ok {
		return nil, fmt.Errorf("tenant %q is not in the test's list: %w", tenant, consumer.ErrUnknownTenant)
	}
	return client, nil
}

func (o *tenantOpener) opened(tenant string) int64 {
	n, ok := o.opens.Load(tenant)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

// Three tenants, each a schema of its own, send events of the same orders
// (the same aggregate ids, and for order 1 the same event ids) through a
// real broker: out of order, each twice, some redelivered after their
// commit. Each tenant's database gets each of its events' effects once,
// in its aggregates' order, with its dedupe records and positions; a
// message without a tenant and one of an unknown tenant go to the
// fallback database's dead letters with their reason.
func TestTenantsApplyTheirEventsInTheirOwnDatabase(t *testing.T) {
	// Not parallel: its newest-first deliveries are nacked by the hundred
	// on the shared NATS server, which would slow the kill tests' drains
	// that run beside the parallel tests (TestHotAggregateDrainsAfterAKill).
	br := openNATS(t)
	prefix := uniquePrefix()
	fallback := setup(t)
	tenants := []string{"acme", "globex", "initech"}
	opener := &tenantOpener{clients: map[string]*testent.Client{}}
	for _, name := range tenants {
		opener.clients[name] = setup(t).client
	}
	var calls, acks atomic.Int64
	h := testent.NewTenantOutboxHandlers(fallback.client, opener.open,
		append(fast(), consumer.WithTopicPrefix(prefix), consumer.WithConcurrency(3),
			consumer.WithGapWait(100*time.Millisecond), consumer.WithLogger(watermill.NopLogger{}),
			// Published newest first, the first events may wait long on a
			// loaded machine: never start an aggregate past them.
			consumer.WithStartAfter(-1))...)
	h.OnOrderPaid("billing", tenantHandler(&calls))

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	var deliveries atomic.Int64
	router.AddMiddleware(func(next message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := next(msg)
			if err == nil && msg.Metadata.Get(events.MetaDeliveryCount) == "1" && deliveries.Add(1)%4 == 0 {
				return nil, errors.New("lost the ack") // committed; the broker delivers it again
			}
			select {
			case <-msg.Nacked(): // waited for its turn, and nacked to come again
			default:
				if err == nil {
					acks.Add(1)
				}
			}
			return out, err
		}
	})
	require.NoError(t, h.AddToRouter(router, br.Subscriber))
	runRouter(t, router)

	const orders, seqs = 2, 5
	published := 0
	publish := func(msg *message.Message, publishID string) {
		msg.Metadata.Set(events.MetaPublishID, publishID)
		require.NoError(t, br.Publisher().Publish(prefix+"orders", msg))
		published++
	}
	for seq := int64(seqs); seq >= 1; seq-- { // the last first: each waits for its predecessor
		for order := int64(1); order <= orders; order++ {
			first := tenantMessage(t, "", order, seq)
			for i, tenant := range tenants {
				msg := first.Copy()
				if order == 2 {
					msg = tenantMessage(t, "", order, seq) // an event id of its own
				}
				msg.Metadata.Set(events.MetaTenant, tenant)
				publish(msg.Copy(), msg.UUID+"/"+strconv.Itoa(i))
				publish(msg, msg.UUID+"/again/"+strconv.Itoa(i)) // a duplicate the broker keeps
			}
		}
	}
	publish(tenantMessage(t, "", 9, 1), "no-tenant")
	publish(tenantMessage(t, "umbrella", 9, 1), "unknown-tenant")

	require.Eventually(t, func() bool { return acks.Load() >= int64(published) }, patience, 20*time.Millisecond,
		"%d of %d messages acknowledged", acks.Load(), published)
	for _, name := range tenants {
		client := opener.clients[name]
		for order := int64(1); order <= orders; order++ {
			applied, by := appliedIn(t, client, order)
			require.Equal(t, []int64{1, 2, 3, 4, 5}, applied, "tenant %s, order %d: each event once, in order", name, order)
			require.Equal(t, []string{name, name, name, name, name}, by, "tenant %s, order %d: the handler was given its tenant", name, order)
		}
		ctx := context.Background()
		require.Equal(t, orders*seqs, client.ProcessedEvent.Query().CountX(ctx), "tenant %s's dedupe records", name)
		require.Equal(t, orders, client.ConsumerPosition.Query().CountX(ctx), "tenant %s's positions", name)
		require.Zero(t, client.DeadLetter.Query().CountX(ctx), "tenant %s's dead letters", name)
		require.Equal(t, int64(1), opener.opened(name), "tenant %s opened once, then kept", name)
	}
	require.Equal(t, int64(len(tenants)*orders*seqs), calls.Load(), "no duplicate reached a handler")

	ctx := context.Background()
	require.Zero(t, fallback.client.Invoice.Query().CountX(ctx), "nothing applied in the fallback")
	require.Zero(t, fallback.client.ProcessedEvent.Query().CountX(ctx))
	var reasons []string
	for _, l := range fallback.client.DeadLetter.Query().AllX(ctx) {
		require.Equal(t, "billing", l.Source)
		reasons = append(reasons, l.Reason)
	}
	require.Len(t, reasons, 2, "the fallback's dead letters: %q", reasons)
	require.Contains(t, strings.Join(reasons, "\n"), "no tenant: the message has no outbox_tenant metadata")
	require.Contains(t, strings.Join(reasons, "\n"), `unknown tenant "umbrella": tenant "umbrella" is not in the test's list: unknown tenant`)
}

// Two tenants get the same events (the same event ids, the same
// aggregate), the second before the first, each twice: each tenant's
// database applies both once, in order. Their dedupe records and
// positions are their own; shared ones would take the second tenant's
// events for duplicates.
func TestTenantsWithTheSameIDsDoNotCollide(t *testing.T) {
	t.Parallel()
	fallback := setup(t)
	opener := &tenantOpener{clients: map[string]*testent.Client{"acme": setup(t).client, "globex": setup(t).client}}
	var calls atomic.Int64
	h := testent.NewTenantOutboxHandlers(fallback.client, opener.open,
		append(fast(), consumer.WithGapWait(100*time.Millisecond), consumer.WithLogger(watermill.NopLogger{}))...)
	h.OnOrderPaid("billing", tenantHandler(&calls))
	ctx := context.Background()
	first, second := tenantMessage(t, "", 1, 1), tenantMessage(t, "", 1, 2)
	of := func(msg *message.Message, tenant string) *message.Message {
		msg = msg.Copy()
		msg.Metadata.Set(events.MetaTenant, tenant)
		return msg
	}
	var wg sync.WaitGroup
	for _, tenant := range []string{"acme", "globex"} {
		wg.Go(func() { handleUntilAcked(t, h, "billing", of(second, tenant)) }) // waits for seq 1
	}
	time.Sleep(50 * time.Millisecond)
	for _, tenant := range []string{"acme", "globex"} {
		require.NoError(t, h.Handle(ctx, "billing", of(first, tenant)))
	}
	wg.Wait()
	for _, tenant := range []string{"acme", "globex"} {
		for _, msg := range []*message.Message{first, second} {
			require.NoError(t, h.Handle(ctx, "billing", of(msg, tenant)), "a duplicate")
		}
	}
	for _, tenant := range []string{"acme", "globex"} {
		client := opener.clients[tenant]
		applied, by := appliedIn(t, client, 1)
		require.Equal(t, []int64{1, 2}, applied, "tenant %s", tenant)
		require.Equal(t, []string{tenant, tenant}, by)
		require.Equal(t, 2, client.ProcessedEvent.Query().CountX(ctx), "tenant %s's dedupe records", tenant)
		require.Equal(t, int64(2), client.ConsumerPosition.Query().OnlyX(ctx).LastSeq, "tenant %s's position", tenant)
	}
	require.Equal(t, int64(4), calls.Load())
	require.Zero(t, fallback.client.Invoice.Query().CountX(ctx))
}

// Direct deliveries: a message without a tenant delivered again is set
// aside once; an opener's error that is not ErrUnknownTenant nacks the
// delivery (a *TenantError) and writes no dead letter; a handler
// registered without a transaction is refused.
func TestTenantMessagesThatCannotBeAppliedNow(t *testing.T) {
	t.Parallel()
	fallback := setup(t)
	tenant := setup(t)
	var down atomic.Bool
	down.Store(true)
	open := func(_ context.Context, name string) (*testent.Client, error) {
		if down.Load() {
			return nil, errors.New("connection refused")
		}
		return tenant.client, nil
	}
	var calls atomic.Int64
	h := testent.NewTenantOutboxHandlers(fallback.client, open, append(fast(), consumer.WithLogger(watermill.NopLogger{}))...)
	h.OnOrderPaid("billing", tenantHandler(&calls))
	ctx := context.Background()

	lost := tenantMessage(t, "", 1, 1)
	for range 3 {
		require.NoError(t, h.Handle(ctx, "billing", lost.Copy()), "acknowledged: set aside")
	}
	require.Equal(t, 1, fallback.client.DeadLetter.Query().CountX(ctx), "one letter for the redelivered message")

	msg := tenantMessage(t, "acme", 1, 1)
	err := h.Handle(ctx, "billing", msg.Copy())
	var te *consumer.TenantError
	require.ErrorAs(t, err, &te, "nacked")
	require.Equal(t, "acme", te.Tenant)
	require.ErrorContains(t, err, "connection refused")
	require.Equal(t, 1, fallback.client.DeadLetter.Query().CountX(ctx), "no letter for a tenant that is down")
	require.Zero(t, tenant.client.DeadLetter.Query().CountX(ctx))

	down.Store(false)
	require.NoError(t, h.Handle(ctx, "billing", msg.Copy()))
	require.NoError(t, h.Handle(ctx, "billing", msg.Copy()), "a duplicate, in the tenant's database")
	applied, by := appliedIn(t, tenant.client, 1)
	require.Equal(t, []int64{1}, applied)
	require.Equal(t, []string{"acme"}, by)
	require.Equal(t, int64(1), calls.Load())

	set := consumer.NewTenantTxSet([]consumer.EventType{{Name: "order.paid", Topic: "orders", Latest: 1}}, nil, nil, consumer.Tables{}, nil, nil)
	err = set.Register("billing", "order.paid", func(context.Context, any, events.Meta) error { return nil })
	require.ErrorContains(t, err, "registered without a transaction, on a set made for tenants")
}

// tenantDatabase creates a database of its own on the test server, for a
// tenant whose database goes down while the others' stay up; it returns
// its URL and the server's admin pool.
func tenantDatabase(t *testing.T) (dbURL, name string, admin *sql.DB) {
	t.Helper()
	admin = pgtest.OpenDB(t, pgtest.ServerURL())
	t.Cleanup(func() { admin.Close() })
	name = pgschema.Name("t_", "tenant_down")
	_, err := admin.Exec(`CREATE DATABASE ` + name)
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := admin.Exec(`DROP DATABASE ` + name + ` WITH (FORCE)`); err != nil {
			t.Logf("dropping database %s: %v", name, err)
		}
	})
	u, err := url.Parse(pgtest.ServerURL())
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String(), name, admin
}

// A tenant's database refuses connections when its first events come:
// the application's opener fails, and the deliveries are nacked and come
// again, without a dead letter, while another tenant's events are applied.
// Once the database accepts connections again, its events are applied,
// once each and in order. The database down is a real one: PostgreSQL
// refuses every connection to it (ALLOW_CONNECTIONS false).
func TestATenantWhoseDatabaseIsDownIsRetriedUntilItIsBack(t *testing.T) {
	t.Parallel()
	br := openNATS(t)
	prefix := uniquePrefix()
	fallback := setup(t)
	up := setup(t)
	downURL, downName, admin := tenantDatabase(t)
	var opened sync.Map
	t.Cleanup(func() {
		opened.Range(func(_, c any) bool { c.(*testent.Client).Close(); return true })
	})
	{
		db := pgtest.OpenDB(t, downURL)
		client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db)))
		pgtest.Migrate(t, client.Schema.Create)
		require.NoError(t, client.Close())
	}
	_, err := admin.Exec(`ALTER DATABASE ` + downName + ` WITH ALLOW_CONNECTIONS false`)
	require.NoError(t, err)

	var failures atomic.Int64
	// The application's opener: it connects to the tenant's database and
	// keeps the client of each tenant it could open.
	open := func(ctx context.Context, tenant string) (*testent.Client, error) {
		switch tenant {
		case "up":
			return up.client, nil
		case "down":
		default:
			return nil, fmt.Errorf("tenant %q: %w", tenant, consumer.ErrUnknownTenant)
		}
		if c, ok := opened.Load(tenant); ok {
			return c.(*testent.Client), nil
		}
		db, err := pgschema.Open(downURL)
		if err != nil {
			return nil, err
		}
		ping, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := db.PingContext(ping); err != nil {
			db.Close()
			failures.Add(1)
			return nil, fmt.Errorf("connecting to tenant %s's database: %w", tenant, err)
		}
		client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db)))
		opened.Store(tenant, client)
		return client, nil
	}
	var calls atomic.Int64
	h := testent.NewTenantOutboxHandlers(fallback.client, open, consumer.WithTopicPrefix(prefix), consumer.WithConcurrency(3),
		consumer.WithBackoff(50*time.Millisecond, 200*time.Millisecond), consumer.WithGapWait(200*time.Millisecond),
		consumer.WithLogger(watermill.NopLogger{}))
	h.OnOrderPaid("billing", tenantHandler(&calls))
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	require.NoError(t, h.AddToRouter(router, br.Subscriber))
	runRouter(t, router)

	for seq := int64(1); seq <= 3; seq++ {
		for _, tenant := range []string{"down", "up"} {
			require.NoError(t, br.Publisher().Publish(prefix+"orders", tenantMessage(t, tenant, 1, seq)))
		}
	}
	require.Eventually(t, func() bool {
		applied, _ := appliedIn(t, up.client, 1)
		return len(applied) == 3 && failures.Load() >= 3
	}, patience, 20*time.Millisecond, "the tenant up applies its events while the other's opens fail")
	applied, _ := appliedIn(t, up.client, 1)
	require.Equal(t, []int64{1, 2, 3}, applied)
	require.Zero(t, fallback.client.DeadLetter.Query().CountX(context.Background()), "a tenant that is down is no dead letter")

	_, err = admin.Exec(`ALTER DATABASE ` + downName + ` WITH ALLOW_CONNECTIONS true`)
	require.NoError(t, err)
	require.Eventually(t, func() bool { c, ok := opened.Load("down"); return ok && c != nil && calls.Load() >= 6 },
		patience, 20*time.Millisecond, "the tenant's events are applied once its database is back")
	c, _ := opened.Load("down")
	down := c.(*testent.Client)
	require.Eventually(t, func() bool { applied, _ := appliedIn(t, down, 1); return len(applied) == 3 }, patience, 20*time.Millisecond)
	applied, by := appliedIn(t, down, 1)
	require.Equal(t, []int64{1, 2, 3}, applied)
	require.Equal(t, []string{"down", "down", "down"}, by)
	require.Zero(t, down.DeadLetter.Query().CountX(context.Background()))
	require.Zero(t, fallback.client.DeadLetter.Query().CountX(context.Background()))
	require.Equal(t, int64(6), calls.Load())
}

// A tenant's event its handler keeps failing on goes to the dead letters
// of the tenant's database, not the fallback's.
func TestATenantsDeadLettersAreInItsDatabase(t *testing.T) {
	t.Parallel()
	fallback := setup(t)
	opener := &tenantOpener{clients: map[string]*testent.Client{"acme": setup(t).client}}
	h := testent.NewTenantOutboxHandlers(fallback.client, opener.open,
		append(fast(), consumer.WithMaxAttempts(2), consumer.WithLogger(watermill.NopLogger{}))...)
	h.OnOrderPaid("billing", func(context.Context, *testent.Tx, *testent.OrderPaid, events.Meta) error {
		return errors.New("ledger closed")
	})
	ctx := context.Background()
	require.NoError(t, h.Handle(ctx, "billing", tenantMessage(t, "acme", 13, 1)), "set aside")
	letters := opener.clients["acme"].DeadLetter.Query().AllX(ctx)
	require.Len(t, letters, 1)
	require.Contains(t, letters[0].Reason, "ledger closed")
	require.Equal(t, 2, letters[0].Attempts)
	require.Zero(t, fallback.client.DeadLetter.Query().CountX(ctx))
}
