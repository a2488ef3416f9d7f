package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/internal/testent/consumerposition"
	"github.com/entoutbox/entoutbox/internal/testent/processedevent"
)

// heldBatch handles msgs at once through h, one transaction at a time
// (the caller's WithConcurrency(1)): the first one's handler waits, in
// its transaction, until every other one waits for a batch, so that they
// all go in the next one. It returns when every delivery has returned.
type heldBatch struct {
	first   chan struct{} // closed when the first handler runs
	release chan struct{}
	once    sync.Once
}

func newHeldBatch() *heldBatch {
	return &heldBatch{first: make(chan struct{}), release: make(chan struct{})}
}

// hold is called by the handler: the first call waits for release.
func (b *heldBatch) hold() {
	first := false
	b.once.Do(func() { first = true; close(b.first) })
	if first {
		<-b.release
	}
}

func (b *heldBatch) run(t *testing.T, h *testent.OutboxHandlers, consumerName string, msgs []*message.Message) {
	t.Helper()
	names := make([]string, len(msgs))
	for i := range names {
		names[i] = consumerName
	}
	b.runFor(t, h, names, msgs)
}

// runFor is run with msgs[i] delivered to consumer names[i].
func (b *heldBatch) runFor(t *testing.T, h *testent.OutboxHandlers, names []string, msgs []*message.Message) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, len(msgs))
	handle := func(i int) {
		defer wg.Done()
		errs <- h.Handle(ctx, names[i], msgs[i])
	}
	wg.Add(len(msgs))
	go handle(0)
	select {
	case <-b.first:
	case <-time.After(patience):
		t.Fatal("the first event's handler never ran")
	}
	for i := range msgs[1:] {
		go handle(i + 1)
	}
	require.Eventually(t, func() bool { return consumer.PendingInBatches(h) == len(msgs)-1 }, patience, time.Millisecond,
		"the other events wait for a batch")
	close(b.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// Events handled at the same moment share a transaction, and two events
// of one aggregate in one batch are applied in their order whatever the
// order they came in.
func TestEventsHandledAtOnceShareATransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	held := newHeldBatch()
	var mu sync.Mutex
	txs := map[*testent.Tx]int{} // events per transaction
	var calls atomic.Int64
	apply := seqHandler(&calls, nil)
	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithConcurrency(1))...)
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		mu.Lock()
		txs[tx]++
		mu.Unlock()
		held.hold()
		return apply(ctx, tx, e, m)
	})
	// Order 1's first event holds the first batch; then orders 2 to 21,
	// and order 1's events 5 down to 2.
	msgs := []*message.Message{seqMessage(t, 1, 1)}
	for order := int64(2); order <= 21; order++ {
		msgs = append(msgs, seqMessage(t, order, 1))
	}
	for seq := int64(5); seq >= 2; seq-- {
		msgs = append(msgs, seqMessage(t, 1, seq))
	}
	held.run(t, h, "billing", msgs)

	require.Equal(t, []int64{1, 2, 3, 4, 5}, b.applied(t, "billing", 1))
	for order := int64(2); order <= 21; order++ {
		require.Equal(t, []int64{1}, b.applied(t, "billing", order), "order %d", order)
	}
	sizes := []int{}
	for _, n := range txs {
		sizes = append(sizes, n)
	}
	require.ElementsMatch(t, []int{1, 24}, sizes, "the first event alone, then the 24 that waited in one transaction")
	require.Equal(t, int64(25), calls.Load(), "each handler ran once")
}

// A handler that fails in a batch rolls the batch back; every event of it
// is then handled in a transaction of its own: the others are applied
// once, and the failing one is retried as its second attempt.
func TestAFailingHandlerRollsBackItsBatchAndTheOthersAreAppliedAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	held := newHeldBatch()
	var mu sync.Mutex
	attempts := map[int64][]int{} // order -> attempts its handler saw
	txs := map[*testent.Tx]int{}
	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithConcurrency(1))...)
	var calls atomic.Int64
	apply := seqHandler(&calls, nil)
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		mu.Lock()
		attempts[e.OrderID] = append(attempts[e.OrderID], m.Attempt)
		txs[tx]++
		mu.Unlock()
		held.hold()
		// The effect first: it must roll back with the failure.
		if err := apply(ctx, tx, e, m); err != nil {
			return err
		}
		if e.OrderID == 7 && m.Attempt == 1 {
			return errors.New("ledger closed")
		}
		if e.OrderID == 9 && m.Attempt == 1 {
			panic("nil map somewhere")
		}
		return nil
	})
	msgs := []*message.Message{}
	for order := int64(1); order <= 12; order++ {
		msgs = append(msgs, seqMessage(t, order, 1))
	}
	held.run(t, h, "billing", msgs)

	for order := int64(1); order <= 12; order++ {
		require.Equal(t, []int64{1}, b.applied(t, "billing", order), "order %d: one effect", order)
	}
	require.Equal(t, []int{1, 2}, attempts[7], "the failure in the batch was order 7's first attempt")
	require.Equal(t, []int{1, 2}, attempts[9], "order 9's panic was its first attempt")
	for order := int64(2); order <= 12; order++ {
		if order == 7 || order == 9 {
			continue
		}
		require.Subset(t, []int{1}, attempts[order], "order %d: a rolled-back batch is no attempt of the others", order)
	}
	secondTries := 0
	for _, p := range b.client.ProcessedEvent.Query().AllX(context.Background()) {
		if p.Attempts == 2 {
			secondTries++
		}
	}
	require.Equal(t, 2, secondTries, "orders 7 and 9 were applied on their second attempt, the others on their first")
	require.Zero(t, b.client.DeadLetter.Query().CountX(context.Background()))
}

// A batch handler is given the events of a shared transaction at once,
// a hot aggregate's run in one call: an aggregate's events in their order,
// without a hole, within the call and across calls.
func TestABatchHandlerIsGivenTheTransactionsEventsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	held := newHeldBatch()
	var mu sync.Mutex
	var sizes []int
	var disorder []string // an aggregate's events not in their order
	next := map[string]int64{}
	txs := map[*testent.Tx]int{}
	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithConcurrency(1))...)
	h.OnOrderPaidBatch("billing", func(ctx context.Context, tx *testent.Tx, batch []testent.OrderPaidDelivery) error {
		mu.Lock()
		sizes = append(sizes, len(batch))
		txs[tx] += len(batch)
		for _, d := range batch {
			if id := d.Meta.AggregateID; d.Meta.AggregateSeq != next[id]+1 {
				disorder = append(disorder, fmt.Sprintf("%s: seq %d after %d", id, d.Meta.AggregateSeq, next[id]))
			}
			next[d.Meta.AggregateID] = d.Meta.AggregateSeq
		}
		mu.Unlock()
		held.hold()
		return tx.Invoice.MapCreateBulk(batch, func(c *testent.InvoiceCreate, i int) {
			c.SetOrderID(batch[i].Event.OrderID).SetAmountCents(batch[i].Meta.AggregateSeq).
				SetCurrency("EUR").SetConsumer(batch[i].Meta.Consumer)
		}).Exec(ctx)
	})
	msgs := []*message.Message{seqMessage(t, 1, 1)}
	for order := int64(2); order <= 21; order++ {
		msgs = append(msgs, seqMessage(t, order, 1))
	}
	for seq := int64(5); seq >= 2; seq-- {
		msgs = append(msgs, seqMessage(t, 1, seq))
	}
	held.run(t, h, "billing", msgs)

	require.Empty(t, disorder)
	require.Equal(t, []int64{1, 2, 3, 4, 5}, b.applied(t, "billing", 1))
	for order := int64(2); order <= 21; order++ {
		require.Equal(t, []int64{1}, b.applied(t, "billing", order), "order %d", order)
	}
	require.Equal(t, []int{1, 24}, sizes,
		"the first event alone; then 20 orders' first events and order 1's run of four in one call")
	perTx := []int{}
	for _, n := range txs {
		perTx = append(perTx, n)
	}
	require.ElementsMatch(t, []int{1, 24}, perTx, "the 24 that waited in one transaction")
	require.Equal(t, 25, b.client.ProcessedEvent.Query().CountX(context.Background()))
}

// A batch handler's error rolls its batch back, and each event is then
// given alone, in a transaction of its own: each effect once.
func TestAFailingBatchHandlerGivesEachEventAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	held := newHeldBatch()
	var mu sync.Mutex
	var sizes []int
	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithConcurrency(1))...)
	h.OnOrderPaidBatch("billing", func(ctx context.Context, tx *testent.Tx, batch []testent.OrderPaidDelivery) error {
		mu.Lock()
		sizes = append(sizes, len(batch))
		mu.Unlock()
		held.hold()
		// The effects first: they must roll back with the failure.
		for _, d := range batch {
			if err := tx.Invoice.Create().SetOrderID(d.Event.OrderID).SetAmountCents(d.Meta.AggregateSeq).
				SetCurrency("EUR").SetConsumer(d.Meta.Consumer).Exec(ctx); err != nil {
				return err
			}
		}
		for _, d := range batch {
			if d.Event.OrderID == 7 && len(batch) > 1 {
				return errors.New("order 7 does not go with others")
			}
		}
		return nil
	})
	msgs := []*message.Message{}
	for order := int64(1); order <= 12; order++ {
		msgs = append(msgs, seqMessage(t, order, 1))
	}
	held.run(t, h, "billing", msgs)

	for order := int64(1); order <= 12; order++ {
		require.Equal(t, []int64{1}, b.applied(t, "billing", order), "order %d: one effect", order)
	}
	require.Equal(t, []int{1, 11, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, sizes, "the failed batch of 11, then each of them alone")
	require.Zero(t, b.client.DeadLetter.Query().CountX(context.Background()))
}

// A batch holds the events of every consumer name of the set: each name's
// positions and records are its own, even for the same events of the same
// aggregates in one transaction.
func TestABatchKeepsEachConsumerNamesPositionsApart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	held := newHeldBatch()
	var calls atomic.Int64
	apply := seqHandler(&calls, nil)
	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithConcurrency(1))...)
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		held.hold()
		return apply(ctx, tx, e, m)
	})
	h.OnOrderPaid("audit", seqHandler(&calls, nil))
	// Order 9's first event to billing holds the first batch; then, in the
	// next one, seqs 1 and 2 of orders 1 to 5 to both names, of orders 11
	// to 15 to audit alone and of orders 21 to 25 to billing alone.
	names, msgs := []string{"billing"}, []*message.Message{seqMessage(t, 9, 1)}
	to := map[string][]int64{"billing": {1, 2, 3, 4, 5, 21, 22, 23, 24, 25}, "audit": {1, 2, 3, 4, 5, 11, 12, 13, 14, 15}}
	for seq := int64(1); seq <= 2; seq++ {
		for name, orders := range to {
			for _, order := range orders {
				names, msgs = append(names, name), append(msgs, seqMessage(t, order, seq))
			}
		}
	}
	held.runFor(t, h, names, msgs)

	ctx := context.Background()
	for name, orders := range to {
		for _, order := range orders {
			require.Equal(t, []int64{1, 2}, b.applied(t, name, order), "%s, order %d", name, order)
		}
		records := 20 + map[string]int{"billing": 1}[name] // billing's with order 9's
		require.Equal(t, records, b.client.ProcessedEvent.Query().Where(processedevent.Consumer(name)).CountX(ctx), "%s's records", name)
		require.Equal(t, 10, b.client.ConsumerPosition.Query().
			Where(consumerposition.Consumer(name), consumerposition.LastSeq(2)).CountX(ctx), "%s's positions at 2", name)
	}
	require.Equal(t, int64(41), calls.Load(), "each handler once per event")
}
