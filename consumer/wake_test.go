package consumer_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/internal/testent/deadletter"
)

// An event waiting in one instance is applied as soon as another instance
// applies its predecessor: the move wakes it (a notification at commit).
// Its pauses between two looks at the position are two minutes long, so
// only the wake can make it prompt.
func TestAWaitingEventIsWokenWhenAnotherInstanceAppliesItsPredecessor(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		other []consumer.Option
	}{
		{"alone", []consumer.Option{consumer.WithBatchSize(1)}}, // the full path's statements
		{"in a batch", nil}, // the batch's statement (internal/batching)
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			wokenByAnotherInstance(t, c.other)
		})
	}
}

func wokenByAnotherInstance(t *testing.T, otherOpts []consumer.Option) {
	b := setup(t)
	ctx := context.Background()
	slow := append(fast(), consumer.WithGapPauses(2*time.Minute, 2*time.Minute), consumer.WithGapWait(10*time.Minute),
		consumer.WithStartAfter(-1))
	var calls atomic.Int64
	waiting := testent.NewOutboxHandlers(b.client, slow...)
	waiting.OnOrderPaid("billing", seqHandler(&calls, nil))
	other := testent.NewOutboxHandlers(b.client, append(slow, otherOpts...)...)
	other.OnOrderPaid("billing", seqHandler(&calls, nil))

	done := make(chan error, 1)
	go func() { done <- waiting.Handle(ctx, "billing", seqMessage(t, 1, 2)) }()
	require.Eventually(t, func() bool {
		var seq sql.NullInt64
		err := b.db.DB.QueryRow(`SELECT waiting_seq FROM outbox_consumer_positions`).Scan(&seq)
		return err == nil && seq.Int64 == 2
	}, patience, 10*time.Millisecond, "seq 2 marks the position it waits on")
	// Applied before the LISTEN is in place, seq 1 would be seen by the
	// look that follows it (at once), not woken by its notification.
	require.Eventually(t, func() bool { return consumer.Listening(waiting) }, patience, 10*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, other.Handle(ctx, "billing", seqMessage(t, 1, 1)))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute): // the next look is two minutes away
		t.Fatal("seq 2 was not woken when the other instance applied seq 1")
	}
	require.Equal(t, []int64{1, 2}, b.applied(t, "billing", 1))
}

// A delivery of an event applied before (a redelivery) waits for nothing:
// it does not start the clock of the aggregate's next gap, which would
// then look older than MaxGap at once and hold the aggregate.
func TestADuplicateDoesNotStartTheClockOfALaterGap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var calls atomic.Int64
	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithMaxGap(2*time.Second))...)
	h.OnOrderPaid("billing", seqHandler(&calls, nil))

	second := seqMessage(t, 1, 2)
	require.NoError(t, h.Handle(ctx, "billing", seqMessage(t, 1, 1)))
	require.NoError(t, h.Handle(ctx, "billing", second.Copy()))
	require.NoError(t, h.Handle(ctx, "billing", second.Copy()), "a redelivery")
	time.Sleep(3 * time.Second) // longer than MaxGap

	done := make(chan error, 1)
	go func() { done <- h.Handle(ctx, "billing", seqMessage(t, 1, 4)) }()
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, h.Handle(ctx, "billing", seqMessage(t, 1, 3)))
	require.NoError(t, <-done)
	require.Equal(t, []int64{1, 2, 3, 4}, b.applied(t, "billing", 1))
	require.Zero(t, b.client.DeadLetter.Query().Where(deadletter.AggregateID("1")).CountX(ctx), "nothing held")
}
