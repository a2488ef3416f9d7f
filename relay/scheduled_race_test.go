package relay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay"
)

// Cancels racing the promotion, each holding its transaction open a moment
// after its Cancel as an application doing more work would: each gets
// Cancelled or TooLate, and what reaches the broker matches, never both
// cancelled and delivered. The cancelled stay in the scheduled table, out
// of the outbox.
func TestCancelRacingThePromotion(t *testing.T) {
	t.Parallel()
	p := setupPath(t, relay.PathFast)
	b := openBroker(t, natsScheduled, "NATS JetStream at 127.0.0.1:4222")
	prefix := uniquePrefix()
	got := receiveTimed(t, b, p.db.DB, prefix)
	runRelay(t, p.config(relay.Config{Publisher: b.Publisher(), TopicPrefix: prefix}))

	const n = 120
	due := dbNow(t, p.db.DB).Add(3 * time.Second)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = emitOne(t, p.client, fmt.Sprintf("race-%d", i%6), events.DeliverAt(due))
	}
	// The cancels spread from a second before the due time to two after.
	start := time.Until(due) - time.Second
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		outcomes = map[string]events.CancelResult{}
	)
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(start + time.Duration(i)*3*time.Second/n)
			ctx := context.Background()
			var res events.CancelResult
			err := p.client.WithTx(ctx, func(tx *testent.Tx) error {
				var err error
				if res, err = tx.Outbox.Cancel(ctx, uuid.MustParse(id)); err != nil {
					return err
				}
				time.Sleep(50 * time.Millisecond)
				return nil
			})
			if err != nil {
				t.Errorf("cancelling %s: %v", id, err)
				return
			}
			mu.Lock()
			outcomes[id] = res
			mu.Unlock()
		}()
	}
	wg.Wait()
	var tooLate, cancelled []string
	for id, res := range outcomes {
		switch res {
		case events.TooLate:
			tooLate = append(tooLate, id)
		case events.Cancelled:
			cancelled = append(cancelled, id)
		default:
			t.Errorf("event %s: %s", id, res)
		}
	}
	t.Logf("%d cancelled, %d too late", len(cancelled), len(tooLate))
	got.waitFor(t, tooLate, patience)
	waitDelivered(t, p.emitBundle, 0)
	var inOutbox, pendingLeft int
	require.NoError(t, p.db.DB.QueryRow(`SELECT (SELECT count(*) FROM outbox_events), 
		(SELECT count(*) FROM outbox_scheduled_events WHERE cancelled_at IS NULL)`).Scan(&inOutbox, &pendingLeft))
	require.Equal(t, len(tooLate), inOutbox, "the outbox holds the events too late to cancel, and only those")
	require.Zero(t, pendingLeft)
	byID, _ := got.first()
	for _, id := range cancelled {
		require.NotContains(t, byID, id, "event %s was cancelled and delivered", id)
	}
	require.Len(t, byID, len(tooLate))
	require.NotEmpty(t, tooLate, "no cancel came too late: the race was not run")
	require.NotEmpty(t, cancelled, "no cancel came in time: the race was not run")
}

// Generated handlers with positions apply each aggregate's events in the
// order the promotion numbered them: immediate and scheduled events of an
// aggregate, in one order, with those due at the same time in commit
// order.
func TestScheduledEventsAppliedInOrderByConsumers(t *testing.T) {
	t.Parallel()
	p := setupPath(t, relay.PathFast)
	b := openBroker(t, natsScheduled, "NATS JetStream at 127.0.0.1:4222")
	prefix := uniquePrefix()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var (
		mu      sync.Mutex
		applied = map[string][]string{} // event ids per aggregate, in the order applied
		seqs    = map[string][]int64{}
	)
	h := testent.NewOutboxHandlers(p.client, consumer.WithTopicPrefix(prefix), consumer.WithConcurrency(4),
		consumer.WithLogger(watermill.NopLogger{}))
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		mu.Lock()
		defer mu.Unlock()
		applied[m.AggregateID] = append(applied[m.AggregateID], m.EventID.String())
		seqs[m.AggregateID] = append(seqs[m.AggregateID], m.AggregateSeq)
		return nil
	})
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	require.NoError(t, h.AddToRouter(r, func(name string) (message.Subscriber, error) { return b.Subscriber(prefix + name) }))
	routed := make(chan error, 1)
	go func() { routed <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-routed })
	<-r.Running()

	due := dbNow(t, p.db.DB).Add(2 * time.Second)
	want := map[string][]string{} // the atDue pairs, in commit order
	total := 0
	for i := range 4 {
		agg := fmt.Sprintf("%d", i)
		emitOne(t, p.client, agg)
		first := emitOne(t, p.client, agg, events.DeliverAt(due))
		emitOne(t, p.client, agg)
		second := emitOne(t, p.client, agg, events.DeliverAt(due))
		emitOne(t, p.client, agg, events.DeliverAfter(500*time.Millisecond))
		emitOne(t, p.client, agg)
		want[agg] = []string{first, second}
		total += 6
	}
	runRelay(t, p.config(relay.Config{Publisher: b.Publisher(), TopicPrefix: prefix}))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, ids := range applied {
			n += len(ids)
		}
		return n == total
	}, patience, 20*time.Millisecond, "not every event was applied")
	mu.Lock()
	defer mu.Unlock()
	for agg, pair := range want {
		require.Equal(t, []int64{1, 2, 3, 4, 5, 6}, seqs[agg], "aggregate %s applied in its order", agg)
		var order []string
		for _, id := range applied[agg] {
			if id == pair[0] || id == pair[1] {
				order = append(order, id)
			}
		}
		require.Equal(t, pair, order, "aggregate %s: events due together applied in commit order", agg)
	}
}

// A Subscriber moves the scheduled events into the outbox when due, as the
// relay does, from its first Subscribe until Close: a program relaying
// through its own router needs nothing more.
func TestSubscriberPromotesScheduledEvents(t *testing.T) {
	t.Parallel()
	p := setupPath(t, relay.PathFast)
	sub, err := relay.NewSubscriber(p.db.DB, relay.SubscriberConfig{PollInterval: 20 * time.Millisecond,
		Logger: watermill.NopLogger{}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := sub.Subscribe(ctx, relay.AllTopics)
	require.NoError(t, err)
	type arrived struct {
		id, deliverAt string
		at            time.Time
	}
	got := make(chan arrived, 10)
	go func() {
		for msg := range msgs {
			a := arrived{id: msg.UUID, deliverAt: msg.Metadata.Get(events.MetaDeliverAt)}
			if err := p.db.DB.QueryRow(`SELECT clock_timestamp()`).Scan(&a.at); err != nil {
				t.Errorf("reading the database's clock: %v", err)
			}
			msg.Ack()
			got <- a
		}
	}()
	id := emitOne(t, p.client, "sub", events.DeliverAfter(500*time.Millisecond))
	select {
	case a := <-got:
		require.Equal(t, id, a.id)
		due, err := time.Parse(time.RFC3339Nano, a.deliverAt)
		require.NoError(t, err)
		require.False(t, a.at.Before(due), "arrived at %s, due at %s", a.at, due)
	case <-time.After(patience):
		t.Fatal("the scheduled event did not arrive")
	}
	require.NoError(t, sub.Close())
	emitOne(t, p.client, "sub", events.DeliverAfter(0))
	time.Sleep(time.Second)
	var waiting int
	require.NoError(t, p.db.DB.QueryRow(`SELECT count(*) FROM outbox_scheduled_events`).Scan(&waiting))
	require.Equal(t, 1, waiting, "a closed Subscriber still promotes")
}

// A transaction that emitted an event of an aggregate and stays open (its
// counter held) holds back no other aggregate's due event, and cancels
// its own aggregate's due event without a deadlock: the promotion skips
// that aggregate until the transaction ends.
func TestOpenEmitHoldsBackNoOtherAggregatesPromotion(t *testing.T) {
	t.Parallel()
	p := setupPath(t, relay.PathFast)
	b := openBroker(t, "mem://", "")
	prefix := uniquePrefix()
	got := receiveTimed(t, b, p.db.DB, prefix)
	due := dbNow(t, p.db.DB).Add(time.Second)
	held := emitOne(t, p.client, "held", events.DeliverAt(due))
	other := emitOne(t, p.client, "other", events.DeliverAt(due))
	runRelay(t, p.config(relay.Config{Publisher: b.Publisher(), TopicPrefix: prefix}))

	ctx := context.Background()
	tx, err := p.client.Tx(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	now := uuid.New()
	require.NoError(t, tx.Outbox.EmitOrderPaid(ctx, "held", testent.OrderPaid{OrderID: 1, AmountCents: 1}, events.WithEventID(now)))
	got.waitFor(t, []string{other}, 30*time.Second)
	res, err := tx.Outbox.Cancel(ctx, uuid.MustParse(held))
	require.NoError(t, err)
	require.Equal(t, events.Cancelled, res)
	require.NoError(t, tx.Commit())

	got.waitFor(t, []string{now.String()}, patience)
	waitDelivered(t, p.emitBundle, 0)
	byID, _ := got.first()
	require.NotContains(t, byID, held, "a cancelled event arrived")
}
