package relay_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay"
)

// A transaction writes more rows of an aggregate than a claim takes and
// stays open while a later row is claimed, so that the cursor passes its
// rows. Once it commits, the next claims read only its rows below the
// cursor, a batch at a time; they must keep reading them (the first
// claim's snapshot saw the transaction open; theirs do not) until all are
// read, before a row written after it on the same aggregate.
func TestFastClaimsOfLateRowsOnlyKeepTheirTransactions(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Claims of 16 rows at most, woken by notifications only: a poll would
	// read from the oldest row once a second, and so read the late rows
	// without their transaction.
	sub, err := relay.NewSubscriber(b.db.DB, relay.SubscriberConfig{Partitions: 1, BatchSize: 16, PollInterval: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	msgs, err := sub.Subscribe(ctx, relay.AllTopics)
	require.NoError(t, err)
	// The consumer takes messages while the gate is a closed channel.
	var gate atomic.Pointer[chan struct{}]
	open := make(chan struct{})
	close(open)
	gate.Store(&open)
	got := newReceived()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-*gate.Load():
			}
			select {
			case <-ctx.Done():
				return
			case msg, ok := <-msgs:
				if !ok {
					return
				}
				got.add(msg)
				msg.Ack()
			}
		}
	}()

	want := emitted{ids: map[string]bool{}, rolledBack: map[string]bool{}, perAggregate: map[string][]string{}}
	emit := func(tx *testent.Tx, agg string) {
		id := uuid.New()
		require.NoError(t, tx.Outbox.EmitOrderPaid(ctx, agg, testent.OrderPaid{OrderID: 1, AmountCents: 100}, events.WithEventID(id)))
		want.ids[id.String()] = true
		want.perAggregate[agg] = append(want.perAggregate[agg], id.String())
	}
	commitOne := func(agg string) string {
		tx, err := b.client.Tx(ctx)
		require.NoError(t, err)
		emit(tx, agg)
		require.NoError(t, tx.Commit())
		return want.perAggregate[agg][len(want.perAggregate[agg])-1]
	}

	// Its rows come first in id order, and wait uncommitted.
	late, err := b.client.Tx(ctx)
	require.NoError(t, err)
	defer late.Rollback()
	for range 100 {
		emit(late, "late")
	}
	require.NoError(t, late.Outbox.Flush(ctx))
	// A later row is claimed: the cursor passes the late rows.
	commitOne("other")
	require.Eventually(t, func() bool { return got.distinct() == 1 }, patience, time.Millisecond,
		"the later row was not delivered")
	waitDelivered(t, b, 0)

	// Held back, the consumer lets the claims fill the batch with late
	// rows and wait, while the later row of the aggregate commits.
	held := make(chan struct{})
	gate.Store(&held)
	require.NoError(t, late.Commit())
	require.Eventually(t, func() bool { return relay.SubscriberBytesHeld(sub) > 0 }, patience, time.Millisecond,
		"the late rows were not claimed")
	after := commitOne("late")
	time.Sleep(200 * time.Millisecond) // its notification comes while the batch is full
	close(held)

	got.waitFor(t, want, patience)
	at := slices.Index(got.firstSeen()["late"], after)
	require.Equal(t, 100, at, "the row written after the transaction arrived after %d of its 100 rows", at)
	got.requireExactly(t, want)
}
