package consumer_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/internal/testent/invoice"
)

// Where the broker splits a topic by aggregate (NATS, Redis, RabbitMQ), the
// instances of a consumer name divide its partitions among them: once all
// three have joined, each aggregate's events are applied by one instance
// only, and every instance applies some. When one of them stops, the other
// two take its partitions over and every event is applied all the same.
func TestEachAggregateReachesOneInstance(t *testing.T) {
	t.Parallel()
	for _, ob := range orderBrokers {
		if ob.name != "nats" && ob.name != "redis" && ob.name != "amqp" {
			continue
		}
		t.Run(ob.name, func(t *testing.T) {
			t.Parallel()
			// A NATS subscriber hands out many messages at once: one member
			// per instance; on Redis and RabbitMQ each of
			// WithConcurrency(3)'s subscribers is a member of its own.
			perInstance := map[string]int{"nats": 1, "redis": 3, "amqp": 3}[ob.name]
			eachAggregateReachesOneInstance(t, ob.url(t), ob.service, perInstance)
		})
	}
}

func eachAggregateReachesOneInstance(t *testing.T, brokerURL, service string, perInstance int) {
	const (
		instances  = 3
		aggregates = 30
		perAgg     = 10
	)
	b := setup(t)
	prefix := uniquePrefix()
	topic := prefix + "orders"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func() broker.Broker {
		octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
		defer ocancel()
		br, err := broker.Open(octx, brokerURL, broker.Options{})
		if err != nil {
			pgtest.Unavailable(t, service, err)
		}
		require.NoError(t, err)
		t.Cleanup(func() { _ = br.Close() })
		return br
	}
	start := func(name string) context.CancelFunc {
		br := open()
		h := testent.NewOutboxHandlers(b.client, consumer.WithTopicPrefix(prefix), consumer.WithConcurrency(3),
			consumer.WithLogger(watermill.NopLogger{}))
		h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
			return tx.Invoice.Create().SetOrderID(e.OrderID).SetAmountCents(m.AggregateSeq).
				SetCurrency(name).SetConsumer(m.Consumer).Exec(ctx)
		})
		r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
		require.NoError(t, err)
		require.NoError(t, h.AddToRouter(r, br.Subscriber))
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		select {
		case <-r.Running():
		case err := <-done:
			t.Fatalf("router stopped: %v", err)
		case <-time.After(patience):
			t.Fatal("router did not start")
		}
		return func() { stop(); <-done }
	}
	stops := make([]context.CancelFunc, instances)
	for i := range stops {
		stops[i] = start("instance-" + strconv.Itoa(i))
	}
	t.Cleanup(func() {
		for _, stop := range stops {
			stop()
		}
	})
	members := func() int {
		var n int
		require.NoError(t, b.db.DB.QueryRowContext(ctx, `SELECT count(*) FROM outbox_consumer_positions_members
			WHERE consumer = 'billing' AND topic = $1 AND until > now()`, topic).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return members() == instances*perInstance }, patience, 50*time.Millisecond,
		"the instances joined the group")
	time.Sleep(2 * time.Second) // a beat for each to take its share, with room

	pub := open()
	relayTo(t, ctx, b, pub.Publisher(), prefix)
	emit := func(round int) {
		for i := range perAgg / 2 {
			err := b.client.WithTx(ctx, func(tx *testent.Tx) error {
				for order := int64(1); order <= aggregates; order++ {
					if err := tx.Outbox.EmitOrderPaid(ctx, strconv.FormatInt(order, 10),
						testent.OrderPaid{OrderID: order, AmountCents: int64(round*100 + i + 1)}); err != nil {
						return err
					}
				}
				return nil
			})
			require.NoError(t, err)
		}
	}
	applied := func() int { return b.client.Invoice.Query().Where(invoice.Consumer("billing")).CountX(ctx) }
	emit(0)
	require.Eventually(t, func() bool { return applied() == aggregates*perAgg/2 }, patience, 100*time.Millisecond,
		"every event applied")

	byAggregate := map[int64]map[string]bool{}
	used := map[string]bool{}
	for _, inv := range b.client.Invoice.Query().Where(invoice.Consumer("billing")).AllX(ctx) {
		if byAggregate[inv.OrderID] == nil {
			byAggregate[inv.OrderID] = map[string]bool{}
		}
		byAggregate[inv.OrderID][inv.Currency] = true
		used[inv.Currency] = true
	}
	for order, by := range byAggregate {
		require.Len(t, by, 1, "aggregate %d was applied by %d instances (%v), want one", order, len(by), by)
	}
	require.Len(t, used, instances, "every instance applied some aggregates: %v", used)

	// One instance leaves: the others read its partitions.
	stops[0]()
	stops[0] = func() {}
	require.Eventually(t, func() bool { return members() == (instances-1)*perInstance }, patience, 50*time.Millisecond,
		"the stopped instance left the group")
	emit(1)
	require.Eventually(t, func() bool { return applied() == aggregates*perAgg }, patience, 100*time.Millisecond,
		"every event applied after an instance left")
	f := billingEffects(t, b, paidCounts(aggregates, perAgg))
	require.Zero(t, f.inversions+f.duplicates+f.missing, "effects: %s", fmt.Sprint(f.first))
}

// paidCounts is n order.paid events for each of aggregates 1 to aggregates.
func paidCounts(aggregates, n int64) map[int64]int64 {
	m := map[int64]int64{}
	for order := int64(1); order <= aggregates; order++ {
		m[order] = n
	}
	return m
}
