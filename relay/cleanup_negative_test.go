package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/relay"
)

// A negative retention would delete every delivered row, however recent:
// refused, nothing deleted.
func TestCleanupDeliveredRefusesNegativeRetention(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	emitOrders(t, b.client, 5, 1, 0)
	_, err := b.db.DB.Exec(`UPDATE outbox_events SET delivered_at = now()`)
	require.NoError(t, err)
	n, err := relay.CleanupDelivered(context.Background(), b.db.DB, "", -time.Hour, 0)
	require.EqualError(t, err, "relay: delivered retention must not be negative, not -1h0m0s")
	require.Zero(t, n)
	var left int
	require.NoError(t, b.db.DB.QueryRow(`SELECT count(*) FROM outbox_events`).Scan(&left))
	require.Equal(t, 5, left)
}
