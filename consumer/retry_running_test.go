package consumer_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/admin"
	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/internal/testent/deadletter"
	"github.com/entoutbox/entoutbox/internal/testent/invoice"
)

// `dead-letters retry` with consumers running: the retried events of a
// held aggregate come back in any order across instances, and a later one
// that comes before the held one is applied waits for it, rather than
// going to the dead letters anew (where the events after it would wait
// for it in vain).
func TestRetryWithConsumersRunningSetsNothingAsideAnew(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var calls atomic.Int64
	var failing atomic.Bool
	failing.Store(true)
	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithMaxAttempts(1), consumer.WithGapWait(time.Minute))...)
	h.OnOrderPaid("billing", seqHandler(&calls, func(seq int64) bool { return failing.Load() && seq == 1 }))
	first, second := seqMessage(t, 9, 1), seqMessage(t, 9, 2)
	require.NoError(t, h.Handle(ctx, "billing", first.Copy()))
	require.NoError(t, h.Handle(ctx, "billing", second.Copy()))
	require.Equal(t, 2, b.client.DeadLetter.Query().CountX(ctx), "seq 1 failed, seq 2 held behind it")

	failing.Store(false)
	a, err := admin.Open(b.db.DB, admin.Tables{})
	require.NoError(t, err)
	ids, err := a.OpenDeadLetterIDs(ctx, admin.Filter{Source: "billing"})
	require.NoError(t, err)
	_, err = a.Retry(ctx, ids...)
	require.NoError(t, err)

	// Seq 2 comes back first, on another instance, before seq 1 is applied.
	done := make(chan error, 1)
	go func() { done <- h.Handle(ctx, "billing", second.Copy()) }()
	time.Sleep(300 * time.Millisecond) // its look at the position comes first
	require.NoError(t, h.Handle(ctx, "billing", first.Copy()))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("seq 2 still waits")
	}
	require.NoError(t, h.Handle(ctx, "billing", seqMessage(t, 9, 3)))
	require.Zero(t, b.client.DeadLetter.Query().Where(deadletter.RetriedAtIsNil(), deadletter.DiscardedAtIsNil()).CountX(ctx),
		"no open dead letter after the retry")
	var seqs []int64
	for _, inv := range b.client.Invoice.Query().Where(invoice.Consumer("billing")).Order(invoice.ByID()).AllX(ctx) {
		seqs = append(seqs, inv.AmountCents)
	}
	require.Equal(t, []int64{1, 2, 3}, seqs)
}
