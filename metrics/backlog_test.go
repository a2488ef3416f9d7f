package metrics_test

import (
	"database/sql"
	"net/url"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/pgschema"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/promtest"
	"github.com/entoutbox/entoutbox/internal/tcpproxy"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/metrics"
	"github.com/entoutbox/entoutbox/outbox"
	"github.com/entoutbox/entoutbox/schema"
)

// patience bounds each wait for what PostgreSQL or a sample will do: a
// liveness bound, not a speed limit.
const patience = 3 * time.Minute

// sampledGauges are the gauges read from the database.
var sampledGauges = []string{
	"entoutbox_outbox_pending_events",
	"entoutbox_outbox_oldest_pending_age_seconds",
	"entoutbox_dead_letters",
	"entoutbox_relays_holding_partitions",
	"entoutbox_consumer_held_aggregates",
	"entoutbox_consumer_lag_events",
	"entoutbox_consumer_lag_oldest_seconds",
}

// While the database cannot be read (behind a proxy the test cuts), the
// sampled gauges are absent rather than frozen at their last values, the
// sample's age grows and the failures are counted; once the database is
// back the gauges return with what happened meanwhile.
func TestBacklogGaugesGoWhileTheDatabaseCannotBeRead(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	pgtest.Migrate(t, client.Schema.Create)
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	proxy := tcpproxy.Start(t, u.Host)
	u.Host = proxy.Addr
	via, err := pgschema.Open(u.String())
	require.NoError(t, err)
	t.Cleanup(func() { via.Close() })

	emit(t, db.DB, 2)
	_, err = db.DB.Exec(`INSERT INTO outbox_consumer_positions (consumer, topic, aggregate_type, aggregate_id, last_seq, updated_at)
		VALUES ('billing', 'orders', 'Order', 'a', 1, now());
		INSERT INTO outbox_consumer_positions (consumer, topic, aggregate_type, aggregate_id, last_seq, held_seq, updated_at)
		VALUES ('audit', 'orders', 'Order', 'a', 1, 2, now())`)
	require.NoError(t, err)

	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	require.NoError(t, m.WatchBacklog(via, metrics.BacklogConfig{MinInterval: time.Millisecond}))
	v := func(name string, labels ...string) float64 { return promtest.Value(t, reg, name, labels...) }
	require.Eventually(t, func() bool {
		return v("entoutbox_consumer_lag_events", "consumer", "billing", "topic", "orders") == 1
	}, patience, 10*time.Millisecond, "the lag sample runs beside the scrapes")
	require.Equal(t, 2.0, v("entoutbox_outbox_pending_events", "topic", "orders"))
	for _, name := range sampledGauges {
		require.True(t, promtest.Present(t, reg, name), "%s while the database answers", name)
	}
	require.Less(t, v("entoutbox_backlog_sample_age_seconds"), 60.0)
	require.Zero(t, v("entoutbox_backlog_sample_errors_total"))
	require.NoError(t, m.BacklogError())

	proxy.Cut()
	emit(t, db.DB, 3) // the truth moves on where the relay cannot see it
	require.Eventually(t, func() bool {
		for _, name := range sampledGauges {
			if promtest.Present(t, reg, name) {
				return false
			}
		}
		return true
	}, patience, 10*time.Millisecond, "the gauges go once their samples fail")
	require.Error(t, m.BacklogError())
	require.GreaterOrEqual(t, v("entoutbox_backlog_sample_errors_total"), 1.0)
	age := v("entoutbox_backlog_sample_age_seconds")
	require.Eventually(t, func() bool { return v("entoutbox_backlog_sample_age_seconds") >= age+1 },
		patience, 10*time.Millisecond, "the age grows while the samples fail")
	errs := v("entoutbox_backlog_sample_errors_total")
	require.Eventually(t, func() bool { return v("entoutbox_backlog_sample_errors_total") > errs },
		patience, 10*time.Millisecond, "each failed sample counts")
	for _, name := range sampledGauges {
		require.False(t, promtest.Present(t, reg, name), "%s while the database cannot be read", name)
	}

	proxy.Restore()
	require.Eventually(t, func() bool {
		return v("entoutbox_outbox_pending_events", "topic", "orders") == 5 &&
			v("entoutbox_consumer_lag_events", "consumer", "billing", "topic", "orders") == 4
	}, patience, 10*time.Millisecond, "the gauges return with the truth")
	require.Less(t, v("entoutbox_backlog_sample_age_seconds"), 60.0)
	require.NoError(t, m.BacklogError())
}

// emit writes n events of aggregate Order/a on topic orders, numbered as
// Emit numbers them.
func emit(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	rows := make([]outbox.Row, n)
	for i := range rows {
		rows[i] = outbox.Row{EventID: uuid.New(), Event: outbox.Event{Name: "order.paid", Version: 2, Topic: "orders",
			AggregateType: "Order", AggregateID: "a", Payload: []byte(`{}`)}}
	}
	q, args, err := outbox.InsertNumberedQuery(schema.OutboxTable, schema.AggregateSequenceTable, rows)
	require.NoError(t, err)
	_, err = db.Exec(q, args...)
	require.NoError(t, err)
}
