package relay_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/admin"
	"github.com/entoutbox/entoutbox/ent"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/tcpproxy"
	"github.com/entoutbox/entoutbox/relay"
)

// A consumer's dead letter of an event the WAL path delivered is retried:
// the event goes back to the outbox and is delivered again, though its row
// never had delivered_at (the WAL path does not write it).
func TestWALDeadLetterRetryRequeuesDeliveredEvent(t *testing.T) {
	t.Parallel()
	s := setupWAL(t)
	pubsub, got := receiveInProcess(t, "orders")
	runRelay(t, s.config(relay.Config{Publisher: pubsub, WAL: relay.WALConfig{ProgressInterval: 50 * time.Millisecond}}))
	waitStreaming(t, s)
	want := emitOrders(t, s.client, 1, 1, 0)
	got.waitFor(t, want, patience)
	var eventID string
	for id := range want.ids {
		eventID = id
	}
	ctx := context.Background()
	var rowID int64
	require.NoError(t, s.db.DB.QueryRow(`SELECT id FROM outbox_events WHERE event_id = $1`, eventID).Scan(&rowID))
	require.Eventually(t, func() bool {
		delivered, err := outboxdb.New("", "").WALDelivered(ctx, s.db.DB, rowID)
		require.NoError(t, err)
		return delivered
	}, patience, 20*time.Millisecond, "the WAL relay records what it delivered")

	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, s.db.DB)))
	d, err := client.DeadLetter.Create().SetEventID(uuid.MustParse(eventID)).SetSource("billing").
		SetReason("handler failed").SetAttempts(5).Save(ctx)
	require.NoError(t, err)
	a, err := admin.Open(s.db.DB, admin.Tables{})
	require.NoError(t, err)
	res, err := a.Retry(ctx, d.ID)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Equal(t, admin.Requeued, res[0].Outcome, "a WAL-delivered event is not pending: it is requeued")
	require.Eventually(t, func() bool {
		got.mu.Lock()
		defer got.mu.Unlock()
		return got.count[eventID] >= 2
	}, patience, 20*time.Millisecond, "the retried event is delivered again")
}

// A WAL relay is ready while it streams its slot, and not while its
// replication connection is gone (it reconnects meanwhile); not before it
// runs.
func TestWALRelayReady(t *testing.T) {
	t.Parallel()
	s := setupWAL(t)
	u, err := url.Parse(s.db.URL)
	require.NoError(t, err)
	proxy := tcpproxy.Start(t, u.Host)
	u.Host = proxy.Addr
	pubsub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	r, err := relay.New(s.config(relay.Config{Publisher: pubsub, WAL: relay.WALConfig{ReplicationURL: u.String()}}))
	require.NoError(t, err)
	ctx := context.Background()
	require.EqualError(t, r.Ready(ctx), "relay: not running")

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	require.Eventually(t, func() bool { return r.Ready(ctx) == nil }, patience, 20*time.Millisecond,
		"not ready while streaming: %v", r.Ready(ctx))
	proxy.Cut()
	require.Eventually(t, func() bool {
		err := r.Ready(ctx)
		return err != nil && strings.Contains(err.Error(), "neither streams slot")
	}, patience, 20*time.Millisecond, "still ready without its replication connection")
	proxy.Restore()
	require.Eventually(t, func() bool { return r.Ready(ctx) == nil }, patience, 20*time.Millisecond,
		"not ready again: %v", r.Ready(ctx))
}

// Replay sends again the events the WAL path delivered (their rows keep
// delivered_at NULL) and leaves out those not delivered yet.
func TestWALDeliveredEventsReplay(t *testing.T) {
	t.Parallel()
	s := setupWAL(t)
	pubsub, got := receiveInProcess(t, "orders")
	stop := runRelay(t, s.config(relay.Config{Publisher: pubsub, WAL: relay.WALConfig{ProgressInterval: 50 * time.Millisecond}}))
	waitStreaming(t, s)
	want := emitOrders(t, s.client, 5, 2, 0)
	got.waitFor(t, want, patience)
	ctx := context.Background()
	require.Eventually(t, func() bool {
		var left int
		require.NoError(t, s.db.DB.QueryRow(`SELECT count(*) FROM outbox_events o WHERE NOT EXISTS (
			SELECT 1 FROM outbox_events_wal_progress p WHERE p.delivered IS NOT NULL
			AND pg_visible_in_snapshot(o.transaction_id, p.delivered))`).Scan(&left))
		return left == 0
	}, patience, 20*time.Millisecond, "the WAL relay records what it delivered")
	require.NoError(t, stop())
	// Written while no relay runs: not delivered, not replayed.
	pending := emitOrders(t, s.client, 2, 1, 0)

	var name string
	require.NoError(t, s.db.DB.QueryRow(`SELECT event_name FROM outbox_events LIMIT 1`).Scan(&name))
	replayed := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	a, err := admin.Open(s.db.DB, admin.Tables{})
	require.NoError(t, err)
	n, err := a.Replay(ctx, replayed, admin.Range{Events: []string{name}}, admin.ReplayOptions{})
	require.NoError(t, err)
	require.Equal(t, len(want.ids), n, "every delivered event replayed, none of those pending (%d)", len(pending.ids))
}
