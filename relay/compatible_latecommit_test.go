package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay"
)

// The compatible path reads in transaction-id order from an offset. A
// transaction A that took its id before B and commits after it must still
// be delivered: the path may not read past A's id while A is open, or A's
// row lands behind the offset and is never read.
func TestCompatiblePathDeliversATransactionThatCommitsLate(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubsub, got := receiveInProcess(t, "orders")
	stop := runRelay(t, relay.Config{DB: b.db.DB, Publisher: pubsub, Path: relay.PathCompatible,
		PollInterval: 20 * time.Millisecond, RetryInterval: 50 * time.Millisecond})

	// The relay is up and has an offset before A begins.
	want := emitOrdersAs(t, b.client, "before", 3, 1, 0)
	got.waitFor(t, want, patience)

	a, err := b.client.Tx(ctx)
	require.NoError(t, err)
	defer a.Rollback()
	aID := uuid.New()
	require.NoError(t, a.Outbox.EmitOrderPaid(ctx, "late", testent.OrderPaid{OrderID: 1, AmountCents: 1},
		events.WithEventID(aID))) // written at once: A has its transaction id now
	later := emitOrdersAs(t, b.client, "later", 5, 1, 0)

	// Give the relay many polls to deliver B's rows, as a path that reads past
	// the open transaction does; this one holds them until A ends.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && !got.hasAll(later) {
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("later rows delivered before the early transaction committed: %t", got.hasAll(later))

	require.NoError(t, a.Commit())
	for id := range later.ids {
		want.ids[id] = true
	}
	want.perAggregate["later"] = later.perAggregate["later"]
	want.ids[aID.String()] = true
	want.perAggregate["late"] = []string{aID.String()}
	got.waitFor(t, want, patience)
	waitDelivered(t, b, 0)
	require.NoError(t, stop())
	got.requireExactly(t, want)
}

// hasAll reports whether r holds every id of want.
func (r *received) hasAll(want emitted) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range want.ids {
		if r.count[id] == 0 {
			return false
		}
	}
	return true
}
