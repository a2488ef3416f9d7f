package consumer_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/promtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/internal/testent/consumerposition"
	"github.com/entoutbox/entoutbox/internal/testent/deadletter"
	"github.com/entoutbox/entoutbox/internal/testent/invoice"
	"github.com/entoutbox/entoutbox/metrics"
	"github.com/entoutbox/entoutbox/outboxtest"
)

// seqMessage is event seq of order aggregate, as the relay sends it.
func seqMessage(t *testing.T, order int64, seq int64) *message.Message {
	t.Helper()
	msg := outboxtest.Message(t, testent.OrderPaid{OrderID: order, AmountCents: seq}, strconv.FormatInt(order, 10))
	msg.Metadata.Set(events.MetaAggregateType, "Order")
	msg.Metadata.Set(events.MetaAggregateSeq, strconv.FormatInt(seq, 10))
	return msg
}

// seqHandler writes the effect of an event as an invoice of its order
// whose amount is the event's seq; it fails while fail says so.
func seqHandler(calls *atomic.Int64, fail func(seq int64) bool) testent.OrderPaidHandler {
	return func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		calls.Add(1)
		if fail != nil && fail(m.AggregateSeq) {
			return errors.New("ledger closed")
		}
		return tx.Invoice.Create().SetOrderID(e.OrderID).SetAmountCents(m.AggregateSeq).
			SetCurrency(e.Currency).SetConsumer(m.Consumer).Exec(ctx)
	}
}

// applied lists the seqs consumerName applied for order, in commit order.
func (b *bundle) applied(t *testing.T, consumerName string, order int64) []int64 {
	t.Helper()
	out := []int64{}
	for _, inv := range b.client.Invoice.Query().Where(invoice.Consumer(consumerName), invoice.OrderID(order)).
		Order(invoice.ByID()).AllX(context.Background()) {
		out = append(out, inv.AmountCents)
	}
	return out
}

// retryLetter does to the dead letter of msg what `entoutbox dead-letters
// retry` does to it before the relay sends the event again.
func (b *bundle) retryLetter(t *testing.T, msg *message.Message) {
	t.Helper()
	id := uuid.MustParse(msg.UUID)
	n, err := b.client.DeadLetter.Update().Where(deadletter.EventID(id)).
		SetRetriedEventID(id).ClearEventID().SetRetriedAt(time.Now()).Save(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, n, "dead letters of event %s", id)
}

// handleUntilAcked delivers msg until Handle acks it, as a broker
// redelivers a nacked message.
func handleUntilAcked(t *testing.T, h *testent.OutboxHandlers, consumerName string, msg *message.Message) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		err := h.Handle(context.Background(), consumerName, msg.Copy())
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("event %s still nacked after %s: %v", msg.UUID, patience, err)
			return
		}
	}
}

// An event that comes before its predecessor waits for it, and one at or
// below the position is a duplicate, even under another event id (a
// replay the broker does not know is one).
func TestAnAggregatesEventsAreAppliedInSeqOrder(t *testing.T) {
	t.Parallel()
	eachDatabase(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		var calls atomic.Int64
		h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithGapWait(100*time.Millisecond))...)
		h.OnOrderPaid("billing", seqHandler(&calls, nil))

		second := seqMessage(t, 1, 2)
		require.Error(t, h.Handle(ctx, "billing", second.Copy()), "seq 2 before seq 1: nacked after GapWait")
		require.Zero(t, calls.Load(), "the handler did not run")
		done := make(chan struct{})
		go func() { defer close(done); handleUntilAcked(t, h, "billing", second) }()
		time.Sleep(20 * time.Millisecond)
		require.NoError(t, h.Handle(ctx, "billing", seqMessage(t, 1, 1)))
		<-done
		require.Equal(t, []int64{1, 2}, b.applied(t, "billing", 1))

		again := seqMessage(t, 1, 1) // seq 1 again, under a new event id
		require.NoError(t, h.Handle(ctx, "billing", again))
		require.Equal(t, []int64{1, 2}, b.applied(t, "billing", 1), "a duplicate below the position")
		require.Equal(t, int64(2), calls.Load())
		pos := b.client.ConsumerPosition.Query().OnlyX(ctx)
		require.Equal(t, int64(2), pos.LastSeq)
		require.Nil(t, pos.WaitingSince, "nothing waits")
	})
}

// Three instances get a hot aggregate's events at once, each event twice
// (once replayed under another id) and in reverse order: the effects are applied once each, in seq order,
// whichever instance's transaction wins each race (the position row's
// lock, on PostgreSQL and MySQL alike).
func TestConcurrentInstancesApplyAHotAggregateInOrder(t *testing.T) {
	t.Parallel()
	eachDatabase(t, func(t *testing.T, b *bundle) {
		var calls atomic.Int64
		var instances []*testent.OutboxHandlers
		for range 3 {
			h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithGapWait(50*time.Millisecond))...)
			h.OnOrderPaid("billing", seqHandler(&calls, nil))
			instances = append(instances, h)
		}
		const events = 12
		var wg sync.WaitGroup
		for seq := int64(events); seq >= 1; seq-- {
			// The twin is a replay under another event id: only the
			// position, read under its lock, tells it is a duplicate.
			for i, msg := range []*message.Message{seqMessage(t, 7, seq), seqMessage(t, 7, seq)} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					handleUntilAcked(t, instances[(int(seq)+i)%len(instances)], "billing", msg)
				}()
			}
		}
		wg.Wait()
		want := make([]int64, events)
		for i := range want {
			want[i] = int64(i + 1)
		}
		require.Equal(t, want, b.applied(t, "billing", 7), "each effect once, in seq order")
		require.Equal(t, int64(events), calls.Load(), "no handler ran for a duplicate")
	})
}

// A dead letter holds its aggregate: the events after it go to the dead
// letters at once, without a try, and the aggregate is released when the
// held event is retried and applied; other aggregates flow meanwhile. The
// metrics count each letter under its reason.
func TestADeadLetterHoldsItsAggregateUntilRetried(t *testing.T) {
	t.Parallel()
	eachDatabase(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		var calls atomic.Int64
		var broken atomic.Bool
		broken.Store(true)
		reg := prometheus.NewPedanticRegistry()
		m, err := metrics.New(reg)
		require.NoError(t, err)
		h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithMaxAttempts(2), consumer.WithMetrics(m))...)
		h.OnOrderPaid("billing", seqHandler(&calls, func(seq int64) bool { return seq == 2 && broken.Load() }))

		first, second, third := seqMessage(t, 1, 1), seqMessage(t, 1, 2), seqMessage(t, 1, 3)
		require.NoError(t, h.Handle(ctx, "billing", first))
		require.NoError(t, h.Handle(ctx, "billing", second.Copy()))
		require.Equal(t, int64(3), calls.Load(), "seq 2 tried twice")
		pos := b.client.ConsumerPosition.Query().OnlyX(ctx)
		require.Equal(t, int64(1), pos.LastSeq)
		require.NotNil(t, pos.HeldSeq)
		require.Equal(t, int64(2), *pos.HeldSeq)
		require.Equal(t, second.UUID, pos.HeldEventID.String())

		require.NoError(t, h.Handle(ctx, "billing", third.Copy()))
		require.Equal(t, int64(3), calls.Load(), "seq 3 was not tried")
		letter := b.client.DeadLetter.Query().Where(deadletter.AggregateSeq(3)).OnlyX(ctx)
		require.Contains(t, letter.Reason, "held: event "+second.UUID+" (seq 2) of aggregate Order/1 is in the dead letters")
		require.Zero(t, letter.Attempts)
		lettered := func(reason string) float64 {
			return promtest.Value(t, reg, "entoutbox_consumer_dead_lettered_total", "consumer", "billing", "reason", reason)
		}
		require.Equal(t, 1.0, lettered(metrics.ReasonMaxAttempts), "seq 2")
		require.Equal(t, 1.0, lettered(metrics.ReasonHeld), "seq 3")
		require.NoError(t, h.Handle(ctx, "billing", second.Copy()), "a redelivery of the held event")
		require.Equal(t, int64(3), calls.Load(), "its letter is open: skipped")

		require.NoError(t, h.Handle(ctx, "billing", seqMessage(t, 2, 1)), "another aggregate")
		require.Equal(t, []int64{1}, b.applied(t, "billing", 2))

		broken.Store(false)
		b.retryLetter(t, second)
		require.NoError(t, h.Handle(ctx, "billing", second.Copy()))
		b.retryLetter(t, third)
		require.NoError(t, h.Handle(ctx, "billing", third.Copy()))
		require.Equal(t, []int64{1, 2, 3}, b.applied(t, "billing", 1))
		pos = b.client.ConsumerPosition.Query().Where(consumerposition.AggregateID("1")).OnlyX(ctx)
		require.Equal(t, int64(3), pos.LastSeq)
		require.Nil(t, pos.HeldSeq, "released")
		require.Equal(t, int64(2), *b.client.DeadLetter.Query().Where(deadletter.RetriedEventID(uuid.MustParse(second.UUID))).
			OnlyX(ctx).AggregateSeq, "the letter keeps its seq")
	})
}

// WithPassOverDeadLetters: the events after a dead letter are applied,
// and the letter, once retried, is applied out of order.
func TestPassOverDeadLetters(t *testing.T) {
	t.Parallel()
	eachDatabase(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		var calls atomic.Int64
		var broken atomic.Bool
		broken.Store(true)
		h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithMaxAttempts(2), consumer.WithPassOverDeadLetters())...)
		h.OnOrderPaid("billing", seqHandler(&calls, func(seq int64) bool { return seq == 2 && broken.Load() }))

		second := seqMessage(t, 1, 2)
		require.NoError(t, h.Handle(ctx, "billing", seqMessage(t, 1, 1)))
		require.NoError(t, h.Handle(ctx, "billing", second.Copy()))
		require.NoError(t, h.Handle(ctx, "billing", seqMessage(t, 1, 3)))
		require.Equal(t, []int64{1, 3}, b.applied(t, "billing", 1))
		require.NoError(t, h.Handle(ctx, "billing", second.Copy()), "a redelivery of the letter")
		require.Equal(t, []int64{1, 3}, b.applied(t, "billing", 1))

		broken.Store(false)
		b.retryLetter(t, second)
		require.NoError(t, h.Handle(ctx, "billing", second.Copy()))
		require.Equal(t, []int64{1, 3, 2}, b.applied(t, "billing", 1), "the retried letter is applied")
		require.Equal(t, int64(3), b.client.ConsumerPosition.Query().OnlyX(ctx).LastSeq)
		require.Zero(t, b.client.ConsumerPosition.Query().Where(consumerposition.HeldSeqNotNil()).CountX(ctx))
	})
}

// A gap that never fills (a relay dead letter never published seq 2):
// after MaxGap the waiting event goes to the dead letters and the
// aggregate is held at the missing seq; when seq 2 comes at last (the
// relay's letter retried) it is applied and releases the aggregate, which
// is then held at seq 3, set aside meanwhile, until it is retried.
func TestAGapThatNeverFillsHoldsTheAggregate(t *testing.T) {
	t.Parallel()
	eachDatabase(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		var calls atomic.Int64
		reg := prometheus.NewPedanticRegistry()
		m, err := metrics.New(reg)
		require.NoError(t, err)
		h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithGapWait(50*time.Millisecond),
			consumer.WithMaxGap(300*time.Millisecond), consumer.WithMetrics(m))...)
		h.OnOrderPaid("billing", seqHandler(&calls, nil))

		require.NoError(t, h.Handle(ctx, "billing", seqMessage(t, 1, 1)))
		third := seqMessage(t, 1, 3)
		handleUntilAcked(t, h, "billing", third)
		letter := b.client.DeadLetter.Query().OnlyX(ctx)
		require.Equal(t, third.UUID, letter.EventID.String())
		require.Contains(t, letter.Reason, "held: seq 2 of aggregate Order/1 on \"orders\" never arrived")
		pos := b.client.ConsumerPosition.Query().OnlyX(ctx)
		require.Equal(t, int64(1), pos.LastSeq)
		require.Equal(t, int64(2), *pos.HeldSeq)
		require.Nil(t, pos.HeldEventID, "the held event never came")

		require.NoError(t, h.Handle(ctx, "billing", seqMessage(t, 1, 4)))
		require.Contains(t, b.client.DeadLetter.Query().Where(deadletter.AggregateSeq(4)).OnlyX(ctx).Reason, "held: seq 2")
		lettered := func(reason string) float64 {
			return promtest.Value(t, reg, "entoutbox_consumer_dead_lettered_total", "consumer", "billing", "reason", reason)
		}
		require.Equal(t, 1.0, lettered(metrics.ReasonPreviousMissing), "seq 3")
		require.Equal(t, 1.0, lettered(metrics.ReasonHeld), "seq 4")

		require.NoError(t, h.Handle(ctx, "billing", seqMessage(t, 1, 2)))
		require.Equal(t, []int64{1, 2}, b.applied(t, "billing", 1))
		pos = b.client.ConsumerPosition.Query().OnlyX(ctx)
		require.Equal(t, int64(2), pos.LastSeq)
		require.Equal(t, int64(3), *pos.HeldSeq, "released from seq 2, held at seq 3: its letter is open")
		require.Equal(t, third.UUID, pos.HeldEventID.String())
		b.retryLetter(t, third)
		require.NoError(t, h.Handle(ctx, "billing", third.Copy()))
		require.Equal(t, []int64{1, 2, 3}, b.applied(t, "billing", 1))
	})
}

// A consumer whose subscription began after an aggregate's first events
// starts it, after StartAfter, at the lowest seq that waited, and says so;
// the events after it follow in order.
func TestAFreshConsumerStartsAnAggregateAtItsLowestWaitingEvent(t *testing.T) {
	t.Parallel()
	eachDatabase(t, func(t *testing.T, b *bundle) {
		logs := &captureLogger{}
		var calls atomic.Int64
		h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithGapWait(50*time.Millisecond),
			consumer.WithStartAfter(3*time.Second), consumer.WithLogger(logs))...)
		h.OnOrderPaid("billing", seqHandler(&calls, nil))

		// 5 and 6 wait once and are nacked; 7 keeps trying, so it is the one
		// that finds StartAfter past, and it starts the aggregate at 5.
		// StartAfter is far longer than one nacked try (GapWait) so that a
		// busy machine does not let 5's first try find it past already.
		five, six, seven := seqMessage(t, 1, 5), seqMessage(t, 1, 6), seqMessage(t, 1, 7)
		require.Error(t, h.Handle(context.Background(), "billing", five.Copy()))
		require.Error(t, h.Handle(context.Background(), "billing", six.Copy()))
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); handleUntilAcked(t, h, "billing", seven) }()
		time.Sleep(600 * time.Millisecond)
		require.Empty(t, b.applied(t, "billing", 1), "7 waits for 5 and 6")
		for _, msg := range []*message.Message{six, five} {
			wg.Add(1)
			go func() { defer wg.Done(); handleUntilAcked(t, h, "billing", msg) }()
		}
		wg.Wait()
		require.Equal(t, []int64{5, 6, 7}, b.applied(t, "billing", 1))
		logs.mu.Lock()
		defer logs.mu.Unlock()
		var said, waits []string
		for _, m := range logs.msgs {
			if strings.Contains(m.Msg, "starts aggregate") {
				said = append(said, m.Msg)
			}
			if strings.Contains(m.Msg, "has applied nothing") {
				waits = append(waits, m.Msg)
			}
		}
		require.Equal(t, []string{"consumer billing starts aggregate Order/1 at seq 5: earlier events were never delivered to it"}, said)
		require.Len(t, waits, 1, "the wait for StartAfter is said once, whatever the redeliveries")
		require.Contains(t, waits[0], "consumer billing has applied nothing of aggregate Order/1 on orders and its first events have not come: "+
			"it waits StartAfter (3s)")
	})
}

// The seqs count every event of an aggregate on its topic: an event the
// consumer has no handler for moves its position on, so that the next one
// it handles does not wait for it.
func TestEventsAConsumerDoesNotHandleTakeTheirPlace(t *testing.T) {
	t.Parallel()
	eachDatabase(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		var calls atomic.Int64
		h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithGapWait(50*time.Millisecond))...)
		h.OnOrderPaid("billing", seqHandler(&calls, nil))
		placed := func(seq int64) *message.Message {
			msg := outboxtest.Message(t, testent.OrderPlaced{OrderID: 1, Lines: []testent.OrderPlacedLine{}}, "1")
			msg.Metadata.Set(events.MetaAggregateType, "Order")
			msg.Metadata.Set(events.MetaAggregateSeq, strconv.FormatInt(seq, 10))
			return msg
		}

		require.NoError(t, h.Handle(ctx, "billing", placed(1)))
		require.NoError(t, h.Handle(ctx, "billing", seqMessage(t, 1, 2)), "seq 2 does not wait for seq 1")
		require.Error(t, h.Handle(ctx, "billing", seqMessage(t, 1, 4)), "seq 4 waits for seq 3")
		require.NoError(t, h.Handle(ctx, "billing", placed(3)))
		require.NoError(t, h.Handle(ctx, "billing", seqMessage(t, 1, 4)))
		require.NoError(t, h.Handle(ctx, "billing", placed(3)), "a duplicate")
		require.Equal(t, []int64{2, 4}, b.applied(t, "billing", 1))
		require.Equal(t, int64(4), b.client.ConsumerPosition.Query().OnlyX(ctx).LastSeq)
		require.Zero(t, b.client.DeadLetter.Query().CountX(ctx))
	})
}

// An event after a gap waits for its predecessor whether events share a
// transaction or each has its own (WithBatchSize(1): the one-statement
// path): seq 3 before seq 2 is nacked without its handler, and once 2 is
// applied 3 follows. Applying 3 at once would also drop 2 as a duplicate.
func TestAnEventAfterAGapWaitsInEveryTransactionShape(t *testing.T) {
	t.Parallel()
	for _, shape := range []struct {
		name string
		opts []consumer.Option
	}{
		{"batched", nil},
		{"one event per transaction", []consumer.Option{consumer.WithBatchSize(1)}},
	} {
		t.Run(shape.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			var calls atomic.Int64
			opts := append(fast(), consumer.WithGapWait(50*time.Millisecond))
			h := testent.NewOutboxHandlers(b.client, append(opts, shape.opts...)...)
			h.OnOrderPaid("billing", seqHandler(&calls, nil))

			require.NoError(t, h.Handle(ctx, "billing", seqMessage(t, 1, 1)))
			third := seqMessage(t, 1, 3)
			require.Error(t, h.Handle(ctx, "billing", third.Copy()), "seq 3 after seq 1 waits for seq 2")
			require.Equal(t, []int64{1}, b.applied(t, "billing", 1), "seq 3 was not applied")
			require.Equal(t, int64(1), calls.Load(), "seq 3's handler did not run")

			require.NoError(t, h.Handle(ctx, "billing", seqMessage(t, 1, 2)))
			require.NoError(t, h.Handle(ctx, "billing", third.Copy()))
			require.Equal(t, []int64{1, 2, 3}, b.applied(t, "billing", 1))
			pos := b.client.ConsumerPosition.Query().OnlyX(ctx)
			require.Equal(t, int64(3), pos.LastSeq)
		})
	}
}
