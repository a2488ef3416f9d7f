package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/relay/consumer"
)

func TestCleanupProcessedDeletesOnlyOldRecordsInBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.db.DB.Exec(`INSERT INTO outbox_processed_events (consumer, event_id, event_name, processed_at)
		SELECT 'billing', gen_random_uuid(), 'order.paid', now() - interval '10 days' FROM generate_series(1, 2500)`)
	require.NoError(t, err)
	_, err = b.db.DB.Exec(`INSERT INTO outbox_processed_events (consumer, event_id, event_name)
		SELECT 'billing', gen_random_uuid(), 'order.paid' FROM generate_series(1, 10)`)
	require.NoError(t, err)

	n, err := consumer.CleanupProcessed(ctx, b.db.DB, "", 7*24*time.Hour, 400)
	require.NoError(t, err)
	require.Equal(t, int64(2500), n)
	require.Equal(t, 10, b.client.ProcessedEvent.Query().CountX(ctx), "recent records stay")
}
