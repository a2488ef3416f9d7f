package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/relay"
)

// Cancelled scheduled events go after the retention, like delivered rows;
// waiting ones never, however old or overdue.
func TestCleanupCancelledKeepsWaitingAndRecent(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	_, err := b.db.DB.Exec(`INSERT INTO outbox_scheduled_events
		(event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, deliver_at, created_at, cancelled_at)
		SELECT gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', g::text, '{}', now() - interval '40 days',
			now() - interval '60 days',
			CASE WHEN g <= 5 THEN now() - interval '30 days' WHEN g <= 7 THEN now() END
		FROM generate_series(1, 10) g`) // 5 cancelled long ago, 2 just now, 3 waiting (overdue)
	require.NoError(t, err)

	n, err := relay.CleanupCancelled(ctx, b.db.DB, "", -time.Hour, 0)
	require.EqualError(t, err, "relay: cancelled retention must not be negative, not -1h0m0s")
	require.Zero(t, n)

	n, err = relay.CleanupCancelled(ctx, b.db.DB, "", 7*24*time.Hour, 2)
	require.NoError(t, err)
	require.Equal(t, int64(5), n)
	var cancelled, waiting int
	require.NoError(t, b.db.DB.QueryRow(`SELECT count(*) FILTER (WHERE cancelled_at IS NOT NULL),
		count(*) FILTER (WHERE cancelled_at IS NULL) FROM outbox_scheduled_events`).Scan(&cancelled, &waiting))
	require.Equal(t, 2, cancelled, "the recent ones are kept")
	require.Equal(t, 3, waiting, "waiting events are never deleted")

	n, err = relay.CleanupCancelled(ctx, b.db.DB, "billing_scheduled", time.Hour, 0)
	require.NoError(t, err, "no such table: nothing to delete")
	require.Zero(t, n)
}
