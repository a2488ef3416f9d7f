package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay"
)

// At start, at info, the relay names its path, table, topic prefix and the
// topics of the last rows as it publishes to them: what a consumer's
// "Consumer subscribing" lines must match.
func TestRelayLogsItsTopicsAtStart(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
		if err := tx.Outbox.EmitOrderPaid(ctx, "1", testent.OrderPaid{OrderID: 1, AmountCents: 5}); err != nil {
			return err
		}
		return tx.Outbox.EmitPriceChanged(ctx, "tea", testent.PriceChanged{Sku: "tea", Amount: 1})
	}))
	logs := newCaptureLogs()
	r, err := relay.New(relay.Config{DB: b.db.DB, Publisher: gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{}),
		TopicPrefix: "prod.", Logger: logs})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()

	require.Eventually(t, func() bool { return len(logsOf(logs, watermill.InfoLogLevel, "Relay starting")) > 0 },
		time.Minute, 10*time.Millisecond)
	started := logsOf(logs, watermill.InfoLogLevel, "Relay starting")
	require.Len(t, started, 1)
	require.Equal(t, watermill.LogFields{"path": relay.PathFast, "table": "outbox_events", "topic_prefix": "prod.",
		"publishes_to": "prod.<the event's topic>", "recent_topics": "prod.catalog,prod.orders",
		"scheduled_table": "outbox_scheduled_events", "promotes_scheduled": true}, started[0].Fields)
}

// Without the scheduled events' table the relay runs, and its start line
// says it promotes nothing.
func TestRelayStartsWithoutTheScheduledTable(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	_, err := b.db.DB.Exec(`DROP TABLE outbox_scheduled_events`)
	require.NoError(t, err)
	logs := newCaptureLogs()
	r, err := relay.New(relay.Config{DB: b.db.DB, Publisher: gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{}),
		Logger: logs})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()
	require.Eventually(t, func() bool { return len(logsOf(logs, watermill.InfoLogLevel, "Relay running")) > 0 },
		time.Minute, 10*time.Millisecond)
	started := logsOf(logs, watermill.InfoLogLevel, "Relay starting")
	require.Len(t, started, 1)
	require.Equal(t, false, started[0].Fields["promotes_scheduled"])
	require.Equal(t, "outbox_scheduled_events", started[0].Fields["scheduled_table"])
}
