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

// A transaction A that wrote its row before B and commits after it must
// still be delivered. On PostgreSQL the compatible path reads in
// transaction-id order from an offset: it may not read past A's id while
// A is open, or A's row lands behind the offset and is never read. On
// MariaDB ids follow the writes, not the commits, and the path reads past
// A (B's rows go out while A is open): A's row, below ids already
// delivered, must be read when it commits all the same.
func TestCompatiblePathDeliversATransactionThatCommitsLate(t *testing.T) {
	t.Parallel()
	forPathsOf(t, []relay.Path{relay.PathCompatible, compatibleMariaDB}, testLateCommitDelivered)
}

// The poll path on MariaDB reads past A too: B's rows go out, and are
// recorded delivered, while A is open (the record of a delivery finds its
// rows by key, and so waits for no row of A's), and A's row goes out when
// it commits.
func TestPollPathOnMariaDBDeliversATransactionThatCommitsLate(t *testing.T) {
	t.Parallel()
	forPathsOf(t, []relay.Path{pollMariaDB}, testLateCommitDelivered)
}

func testLateCommitDelivered(t *testing.T, p *onPath) {
	b := p.emitBundle
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubsub, got := receiveInProcess(t, "orders")
	stop := runRelay(t, p.config(relay.Config{Publisher: pubsub}))

	// The relay is up and has an offset before A begins.
	want := emitOrdersAs(t, b.client, "before", 3, 1, 0)
	got.waitFor(t, want, patience)

	a, err := b.client.Tx(ctx)
	require.NoError(t, err)
	defer a.Rollback()
	aID := uuid.New()
	require.NoError(t, a.Outbox.EmitOrderPaid(ctx, "late", testent.OrderPaid{OrderID: 1, AmountCents: 1},
		events.WithEventID(aID))) // written at once: A has its transaction id, and its row its id, now
	later := emitOrdersAs(t, b.client, "later", 5, 1, 0)

	if b.mysql {
		// B's rows, above A's id, go out and are recorded delivered while
		// A is open: the offset of an id-ordered read would pass A's row.
		got.waitFor(t, later, patience)
		waitAcked(t, b, later)
	} else {
		// Give the relay many polls to deliver B's rows, as a path that
		// reads past the open transaction does; this one holds them until
		// A ends.
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) && !got.hasAll(later) {
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("later rows delivered before the early transaction committed: %t", got.hasAll(later))
	}

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

// waitAcked waits until the rows of want are marked delivered.
func waitAcked(t *testing.T, b *emitBundle, want emitted) {
	t.Helper()
	require.Eventually(t, func() bool {
		var delivered int
		for id := range want.ids {
			var n int
			require.NoError(t, b.sql.QueryRow(b.rebind(`SELECT count(*) FROM outbox_events WHERE event_id = $1 AND delivered_at IS NOT NULL`),
				id).Scan(&n))
			delivered += n
		}
		return delivered == len(want.ids)
	}, patience, 20*time.Millisecond, "rows not marked delivered")
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
