package metrics_test

import (
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/promtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/metrics"
)

// The scheduled events' gauges read the table: those waiting, those due
// and not moved (overdue, and since when), those cancelled; absent without
// the table.
func TestScheduledGauges(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	pgtest.Migrate(t, client.Schema.Create)
	_, err := db.DB.Exec(`INSERT INTO outbox_scheduled_events
		(event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, deliver_at, cancelled_at)
		SELECT gen_random_uuid(), 'order.reminded', 1, 'orders', 'Order', g::text, '{}',
			clock_timestamp() + CASE WHEN g <= 2 THEN interval '-90 seconds' ELSE interval '1 hour' END,
			CASE WHEN g > 5 THEN clock_timestamp() END
		FROM generate_series(1, 8) g`) // 2 overdue, 3 to come, 3 cancelled
	require.NoError(t, err)

	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	require.NoError(t, m.WatchBacklog(db.DB, metrics.BacklogConfig{MinInterval: time.Millisecond}))
	v := func(name string) float64 { return promtest.Value(t, reg, name) }
	require.Equal(t, 5.0, v("entoutbox_scheduled_waiting_events"))
	require.Equal(t, 2.0, v("entoutbox_scheduled_overdue_events"))
	require.InDelta(t, 90, v("entoutbox_scheduled_overdue_seconds"), 30)
	require.Equal(t, 3.0, v("entoutbox_scheduled_cancelled_events"))
	require.NoError(t, m.BacklogError())

	// Moved on time: nothing overdue.
	_, err = db.DB.Exec(`DELETE FROM outbox_scheduled_events WHERE deliver_at <= clock_timestamp() AND cancelled_at IS NULL`)
	require.NoError(t, err)
	time.Sleep(2 * time.Millisecond)
	require.Equal(t, 3.0, v("entoutbox_scheduled_waiting_events"))
	require.Zero(t, v("entoutbox_scheduled_overdue_events"))
	require.Zero(t, v("entoutbox_scheduled_overdue_seconds"))

	// Another table, absent: no gauges, no error.
	require.NoError(t, m.WatchBacklog(db.DB, metrics.BacklogConfig{ScheduledTable: "billing_scheduled"}))
	require.True(t, promtest.Present(t, reg, "entoutbox_outbox_oldest_pending_age_seconds"))
	require.False(t, promtest.Present(t, reg, "entoutbox_scheduled_waiting_events"))
	require.NoError(t, m.BacklogError())
}

// Lateness is observed from the due time to now, by topic; an early clock
// counts as 0.
func TestScheduledLateness(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	m.ScheduledDelivered("orders", time.Now().Add(-3*time.Second))
	m.ScheduledDelivered("orders", time.Now().Add(time.Second))
	m.ScheduledDelivered("orders", time.Time{}) // not scheduled: nothing
	require.Equal(t, 2.0, promtest.Value(t, reg, "entoutbox_scheduled_lateness_seconds", "topic", "orders"))
	require.InDelta(t, 3, promtest.Sum(t, reg, "entoutbox_scheduled_lateness_seconds", "topic", "orders"), 1)
}

// Every metric passes Prometheus' linter (promtool check metrics), with a
// series of each.
func TestMetricsLint(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	pgtest.Migrate(t, client.Schema.Create)
	emit(t, db.DB, 1)
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	require.NoError(t, m.WatchBacklog(db.DB, metrics.BacklogConfig{}))
	recordOneOfEach(m)
	require.True(t, promtest.Present(t, reg, "entoutbox_scheduled_waiting_events"))
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}
