package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/relay"
)

func TestCleanupDeliveredKeepsPendingAndRecentRows(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	emitOrders(t, b.client, 30, 3, 0)
	// 10 delivered long ago, 10 delivered just now, 10 never delivered (and old).
	_, err := b.db.DB.Exec(`UPDATE outbox_events SET delivered_at = now() - interval '30 days' WHERE id <= 10;
		UPDATE outbox_events SET delivered_at = now() WHERE id > 10 AND id <= 20;
		UPDATE outbox_events SET created_at = now() - interval '60 days' WHERE id > 20`)
	require.NoError(t, err)
	n, err := relay.CleanupDelivered(ctx, b.db.DB, "", 7*24*time.Hour, 3)
	require.NoError(t, err)
	require.Equal(t, int64(10), n)
	var left, pending int
	require.NoError(t, b.db.DB.QueryRow(`SELECT count(*), count(*) FILTER (WHERE delivered_at IS NULL) FROM outbox_events`).Scan(&left, &pending))
	require.Equal(t, 20, left)
	require.Equal(t, 10, pending)
}
