package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/consumer"
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

// A negative retention is refused: it would delete every dedupe record,
// recent ones included, and redelivered events would be handled again.
func TestCleanupProcessedRefusesNegativeRetention(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.db.DB.Exec(`INSERT INTO outbox_processed_events (consumer, event_id, event_name)
		SELECT 'billing', gen_random_uuid(), 'order.paid' FROM generate_series(1, 3)`)
	require.NoError(t, err)
	_, err = consumer.CleanupProcessed(ctx, b.db.DB, "", -time.Hour, 0)
	require.EqualError(t, err, "consumer: processed retention must not be negative, not -1h0m0s")
	require.Equal(t, 3, b.client.ProcessedEvent.Query().CountX(ctx))
}
