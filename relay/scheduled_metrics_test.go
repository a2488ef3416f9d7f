package relay_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/promtest"
	"github.com/entoutbox/entoutbox/metrics"
	"github.com/entoutbox/entoutbox/relay"
)

// The relay observes the lateness of a scheduled event's delivery, from
// the due time the promotion wrote into its row's headers to the broker's
// acknowledgement, on the fast and WAL paths; an event sent when emitted
// is not counted.
func TestScheduledLatenessIsObserved(t *testing.T) {
	t.Parallel()
	forPathsOf(t, []relay.Path{relay.PathFast, relay.PathWAL}, testScheduledLatenessIsObserved)
}

func testScheduledLatenessIsObserved(t *testing.T, p *onPath) {
	pubsub, got := receiveInProcess(t, "orders")
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	// Two rows as the promotion writes them, due 2 s ago by the database's
	// clock, and one emitted for now.
	_, err = p.db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type,
			aggregate_id, payload, headers)
		SELECT gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', 'order-' || g,
			'{"order_id": 1, "amount_cents": 5, "currency": "EUR"}',
			CASE WHEN g <= 2 THEN jsonb_build_object('outbox_deliver_at',
				to_char((clock_timestamp() - interval '2 seconds') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')) END
		FROM generate_series(1, 3) g`)
	require.NoError(t, err)
	stop := runRelay(t, p.config(relay.Config{Publisher: pubsub, Metrics: m}))
	require.Eventually(t, func() bool { return got.distinct() == 3 }, patience, 10*time.Millisecond)
	waitDelivered(t, p.emitBundle, 0)
	require.NoError(t, stop())

	require.Equal(t, 3.0, promtest.Value(t, reg, "entoutbox_relay_delivery_lag_seconds", "topic", "orders"))
	require.Equal(t, 2.0, promtest.Value(t, reg, "entoutbox_scheduled_lateness_seconds", "topic", "orders"),
		"the two scheduled events only")
	require.GreaterOrEqual(t, promtest.Sum(t, reg, "entoutbox_scheduled_lateness_seconds", "topic", "orders"), 4.0,
		"each sent at least 2 s after its time")
}

// The relay counts the scheduled events its promoter moved into the
// outbox once due.
func TestScheduledPromotionsAreCounted(t *testing.T) {
	t.Parallel()
	forPathsOf(t, []relay.Path{relay.PathFast}, func(t *testing.T, p *onPath) {
		pubsub, got := receiveInProcess(t, "orders")
		reg := prometheus.NewPedanticRegistry()
		m, err := metrics.New(reg)
		require.NoError(t, err)
		for i := range 3 {
			emitOne(t, p.client, fmt.Sprintf("counted-%d", i), events.DeliverAfter(0))
		}
		emitOne(t, p.client, "counted-later", events.DeliverAfter(time.Hour))
		stop := runRelay(t, p.config(relay.Config{Publisher: pubsub, Metrics: m}))
		require.Eventually(t, func() bool { return got.distinct() == 3 }, patience, 10*time.Millisecond)
		require.NoError(t, stop())
		require.Equal(t, 3.0, promtest.Value(t, reg, "entoutbox_scheduled_promoted_total"),
			"the three due, not the one due in an hour")
		require.Equal(t, 0.0, promtest.Value(t, reg, "entoutbox_scheduled_promote_failures_total"))
	})
}
