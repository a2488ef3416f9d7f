package metrics_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/mysqltest"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/promtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/metrics"
	"github.com/entoutbox/entoutbox/sqlitedb"
)

// gaugeDB is a migrated outbox database for the gauges' tests, and the
// SQL of its clock shifted (negative: ago).
type gaugeDB struct {
	db    *sql.DB
	mysql bool
}

func (g gaugeDB) at(offset time.Duration) string { return mysqltest.ClockAt(g.mysql, offset) }

// exec runs query, its parameters written $1, $2… as on PostgreSQL.
func (g gaugeDB) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	query, args = mysqltest.Rebind(g.mysql, query, args)
	_, err := g.db.Exec(query, args...)
	require.NoError(t, err, query)
}

// The backlog gauges read the same figures on PostgreSQL and MariaDB, from
// the same code: pending events by topic and the oldest's age, open dead
// letters by source, held aggregates, scheduled events, the consumers'
// lag, and the relays holding partitions (the fast relays on PostgreSQL,
// the poll relays on MySQL).
func TestBacklogGaugesOnEveryDatabase(t *testing.T) {
	t.Parallel()
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		pgtest.Migrate(t, testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB))).Schema.Create)
		testBacklogGauges(t, gaugeDB{db: db.DB})
	})
	t.Run("mariadb", func(t *testing.T) {
		t.Parallel()
		db, _ := mysqltest.Open(t)
		require.NoError(t, testent.NewClient(testent.Driver(entsql.OpenDB(dialect.MySQL, db))).Schema.Create(context.Background()))
		testBacklogGauges(t, gaugeDB{db: db, mysql: true})
	})
}

func testBacklogGauges(t *testing.T, g gaugeDB) {
	g.exec(t, `INSERT INTO outbox_aggregate_sequences (topic, aggregate_type, aggregate_id, last_seq) VALUES ('orders', 'Order', 'a', 2)`)
	for seq, age := range []time.Duration{time.Hour, time.Minute} {
		g.exec(t, `INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload,
			aggregate_seq, created_at) VALUES ($1, 'order.paid', 2, 'orders', 'Order', 'a', '{}', $2, `+g.at(-age)+`)`,
			uuid.NewString(), seq+1)
	}
	g.exec(t, `INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload,
		created_at, delivered_at) VALUES ($1, 'order.paid', 2, 'archive', 'Order', 'b', '{}', `+g.at(-2*time.Hour)+`, `+g.at(0)+`)`,
		uuid.NewString())
	for _, source := range []string{"relay", "billing", "billing"} {
		g.exec(t, `INSERT INTO outbox_dead_letters (event_id, source, reason, attempts, created_at) VALUES ($1, $2, 'x', 1, `+
			g.at(0)+`)`, uuid.NewString(), source)
	}
	g.exec(t, `INSERT INTO outbox_consumer_positions (consumer, topic, aggregate_type, aggregate_id, last_seq, held_seq,
		held_event_id, held_at, updated_at) VALUES ('billing', 'orders', 'Order', 'a', 1, 2, $1, `+g.at(0)+`, `+g.at(0)+`)`,
		uuid.NewString())
	for _, in := range []time.Duration{-90 * time.Second, time.Hour} {
		g.exec(t, `INSERT INTO outbox_scheduled_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id,
			payload, deliver_at) VALUES ($1, 'order.reminded', 1, 'orders', 'Order', 'c', '{}', `+g.at(in)+`)`, uuid.NewString())
	}

	g.leasePartitions(t, "r1", "r2")

	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	require.NoError(t, m.WatchBacklog(g.db, metrics.BacklogConfig{MinInterval: time.Millisecond}))
	v := func(name string, labels ...string) float64 { return promtest.Value(t, reg, name, labels...) }
	require.Eventually(t, func() bool {
		return promtest.Present(t, reg, "entoutbox_consumer_lag_events", "consumer", "billing", "topic", "orders")
	}, patience, 10*time.Millisecond, "the lag sample runs beside the scrapes")
	require.NoError(t, m.BacklogError())
	require.Equal(t, 2.0, v("entoutbox_outbox_pending_events", "topic", "orders"))
	require.False(t, promtest.Present(t, reg, "entoutbox_outbox_pending_events", "topic", "archive"), "its row is delivered")
	require.InDelta(t, time.Hour.Seconds(), v("entoutbox_outbox_oldest_pending_age_seconds"), 60)
	require.Equal(t, 1.0, v("entoutbox_dead_letters", "source", "relay"))
	require.Equal(t, 2.0, v("entoutbox_dead_letters", "source", "consumer"))
	require.Equal(t, 1.0, v("entoutbox_consumer_held_aggregates", "consumer", "billing"))
	require.Equal(t, 1.0, v("entoutbox_relays_holding_partitions"), "r1 holds one; r2's lease lapsed")
	require.Equal(t, 2.0, v("entoutbox_scheduled_waiting_events"))
	require.Equal(t, 1.0, v("entoutbox_scheduled_overdue_events"))
	require.InDelta(t, 90, v("entoutbox_scheduled_overdue_seconds"), 30)
	require.Zero(t, v("entoutbox_scheduled_cancelled_events"))
	require.Equal(t, 1.0, v("entoutbox_consumer_lag_events", "consumer", "billing", "topic", "orders"))
	require.InDelta(t, time.Minute.Seconds(), v("entoutbox_consumer_lag_oldest_seconds", "consumer", "billing", "topic", "orders"), 30)
	require.False(t, promtest.Present(t, reg, "entoutbox_wal_slot_active"), "no WAL relay ran; on MySQL none can")
}

// On SQLite WatchBacklog refuses, naming the databases it samples, rather
// than report failed samples for ever.
func TestWatchBacklogRefusesSQLite(t *testing.T) {
	t.Parallel()
	db, err := sqlitedb.Open("sqlite:" + filepath.Join(t.TempDir(), "app.db"))
	require.NoError(t, err)
	defer db.Close()
	m, err := metrics.New(prometheus.NewPedanticRegistry())
	require.NoError(t, err)
	require.EqualError(t, m.WatchBacklog(db, metrics.BacklogConfig{}),
		"metrics: WatchBacklog samples PostgreSQL and MySQL; on SQLite not yet")
}

// leasePartitions makes the outbox's relays share two partitions, as
// relays lease them (fast relays on PostgreSQL, poll relays on MySQL):
// live holds the first for a minute, lapsed held the second until a
// minute ago.
func (g gaugeDB) leasePartitions(t *testing.T, live, lapsed string) {
	t.Helper()
	if g.mysql {
		g.exec(t, "CREATE TABLE outbox_events_relay_lease (id INT PRIMARY KEY, holder VARCHAR(255) NOT NULL, `until` DATETIME(6) NOT NULL)")
		g.exec(t, "INSERT INTO outbox_events_relay_lease (id, holder, `until`) VALUES (0, $1, "+g.at(time.Minute)+"), (1, $2, "+
			g.at(-time.Minute)+")", live, lapsed)
		return
	}
	g.exec(t, `CREATE TABLE outbox_events_partitions (topic text NOT NULL, partition int NOT NULL, relay text NOT NULL DEFAULT '',
		until timestamptz NOT NULL DEFAULT '-infinity', PRIMARY KEY (topic, partition))`)
	g.exec(t, `CREATE TABLE outbox_events_relays (topic text NOT NULL, relay text NOT NULL, until timestamptz NOT NULL,
		live_lock boolean NOT NULL DEFAULT false, PRIMARY KEY (topic, relay))`)
	g.exec(t, `INSERT INTO outbox_events_partitions (topic, partition, relay, until) VALUES ('', 0, $1, `+g.at(time.Minute)+`),
		('', 1, $2, `+g.at(-time.Minute)+`)`, live, lapsed)
}
