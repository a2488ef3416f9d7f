package relay_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/relay"
)

// openRow begins a transaction that writes one outbox row of aggregate agg
// and stays open; it returns the transaction, the row's event id and the
// transaction's id as pg_locks shows it (32 bits).
func openRow(t *testing.T, db *sql.DB, agg string) (*sql.Tx, string, string) {
	t.Helper()
	tx, err := db.Begin()
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	id := uuid.NewString()
	_, err = tx.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id,
		payload) VALUES ($1, 'order.paid', 1, 'orders', 'Order', $2, '{}')`, id, agg)
	require.NoError(t, err)
	var xid string
	require.NoError(t, tx.QueryRow(`SELECT pg_current_xact_id()::xid::text`).Scan(&xid))
	return tx, id, xid
}

// Cleanup never deletes, by the WAL path's snapshots, a row the stream
// has not delivered: not those committed before the slot's start (the
// relay sends those itself and marks them delivered_at) (visible in its creation snapshot, the
// latest of them numbered above that snapshot's xmin), not those of a
// transaction open when the relay recorded what it delivered (numbered
// below that snapshot's xmax), not those committed after. It deletes the
// rows the WAL path delivered.
func TestWALCleanupNeverDeletesRowsTheWALPathDidNotDeliver(t *testing.T) {
	t.Parallel()
	s := setupWAL(t)
	ctx := context.Background()
	kept := map[string]string{} // event id: why it must stay
	keep := func(e emitted, why string) {
		for id := range e.ids {
			kept[id] = why
		}
	}
	keep(emitOrdersAs(t, s.client, "before", 5, 2, 0), "committed before the slot was created")

	// Creating a slot waits, twice, for the transactions running on the
	// server; what commits before it is done is visible in the slot's
	// snapshot and never streamed. The snapshot's xmin is the oldest
	// transaction running when it is done (open below), so the
	// transactions committed during the second wait (during) are above it.
	first, firstID, firstXID := openRow(t, s.db.DB, "first")
	kept[firstID] = "committed while the slot was being created"
	pubsub, got := receiveInProcess(t, "orders")
	stop := runRelay(t, s.config(relay.Config{Publisher: pubsub, WAL: relay.WALConfig{ProgressInterval: 50 * time.Millisecond}}))
	waitsFor := func(xid string) {
		t.Helper()
		require.Eventually(t, func() bool {
			var waiting bool
			require.NoError(t, s.db.DB.QueryRow(`SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_replication_slots r
				ON l.pid = r.active_pid WHERE r.slot_name = $1 AND l.locktype = 'transactionid' AND NOT l.granted
				AND l.transactionid::text = $2)`, s.slot, xid).Scan(&waiting))
			return waiting
		}, patience, 10*time.Millisecond, "creating slot %s does not wait for transaction %s", s.slot, xid)
	}
	waitsFor(firstXID)
	second, secondID, secondXID := openRow(t, s.db.DB, "second")
	kept[secondID] = "committed while the slot was being created"
	require.NoError(t, first.Commit())
	waitsFor(secondXID) // its second wait
	open, openID, _ := openRow(t, s.db.DB, "open")
	kept[openID] = "committed after the relay stopped, its transaction open all the while it ran"
	keep(emitOrdersAs(t, s.client, "during", 5, 2, 0), "committed while the slot was being created, above its xmin")
	require.NoError(t, second.Commit())
	waitStreaming(t, s)

	delivered := emitOrders(t, s.client, 20, 3, 0)
	got.waitFor(t, delivered, patience)
	var last int64
	require.NoError(t, s.db.DB.QueryRow(`SELECT max(id) FROM outbox_events`).Scan(&last))
	require.Eventually(t, func() bool {
		ok, err := outboxdb.New("", "").WALDelivered(ctx, s.db.DB, last)
		require.NoError(t, err)
		return ok
	}, patience, 20*time.Millisecond, "the relay does not record what it delivered")
	require.NoError(t, stop())
	require.NoError(t, open.Commit())
	keep(emitOrdersAs(t, s.client, "later", 5, 2, 0), "committed after the relay stopped")
	// The rows committed before the slot's start, never streamed, the relay
	// sent itself (and marked delivered_at) before the stream's; the
	// others it never saw.
	got.mu.Lock()
	for id, why := range kept {
		if strings.HasPrefix(why, "committed after") {
			require.Zero(t, got.count[id], "event %s was delivered by the WAL path (%s): the test's premise fails", id, why)
		} else {
			require.NotZero(t, got.count[id], "event %s (%s) was not sent before the stream's", id, why)
		}
	}
	got.mu.Unlock()
	// Cleanup's WAL condition alone must keep them: set their mark back.
	_, err := s.db.DB.Exec(`UPDATE outbox_events SET delivered_at = NULL`)
	require.NoError(t, err)

	// The test proves something only if the rows reach the snapshot
	// conditions, not just the transaction-id ranges around them.
	inCreated := func(ids map[string]string, where string) int {
		var n int
		require.NoError(t, s.db.DB.QueryRow(`SELECT count(*) FROM outbox_events o, outbox_events_wal_progress p
			WHERE p.slot = $1 AND o.event_id::text = ANY($2) AND `+where, s.slot, keys(ids)).Scan(&n))
		return n
	}
	during := map[string]string{}
	for id, why := range kept {
		if why == "committed while the slot was being created, above its xmin" {
			during[id] = why
		}
	}
	require.Equal(t, len(during), inCreated(during, `o.transaction_id >= pg_snapshot_xmin(p.created)
		AND pg_visible_in_snapshot(o.transaction_id, p.created)`),
		"the rows committed during the slot's creation are not above its snapshot's xmin and visible in it")
	require.Equal(t, 1, inCreated(map[string]string{openID: ""}, `o.transaction_id < pg_snapshot_xmax(p.delivered)
		AND NOT pg_visible_in_snapshot(o.transaction_id, p.delivered)`),
		"the open transaction's row is not below the delivered snapshot's xmax and invisible in it")

	_, err = s.db.DB.Exec(`UPDATE outbox_events SET created_at = now() - interval '30 days'`)
	require.NoError(t, err)
	n, err := relay.CleanupDelivered(ctx, s.db.DB, "", 7*24*time.Hour, 4)
	require.NoError(t, err)
	left := map[string]bool{}
	rows, err := s.db.DB.Query(`SELECT event_id FROM outbox_events`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		left[id] = true
	}
	require.NoError(t, rows.Err())
	for id, why := range kept {
		require.True(t, left[id], "cleanup deleted row %s, which the WAL path did not deliver (%s)", id, why)
	}
	require.Equal(t, int64(len(delivered.ids)), n, "cleanup deletes the rows the WAL path delivered")
	require.Len(t, left, len(kept))
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
