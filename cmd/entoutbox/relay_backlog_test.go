package main

import (
	"context"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/sqlitedb"
)

// metricValue is series' value in a scrape, -1 when it is absent.
func metricValue(t *testing.T, body, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}

// The relay command's /metrics samples the backlog of the database it
// relays from, PostgreSQL or MariaDB, from the same code: the open dead
// letters, the held aggregates, the scheduled events waiting and the relay
// holding partitions (the fast path's on PostgreSQL, the poll path's on
// MariaDB), with no failed sample; status shows the relay too.
func TestRelayServesBacklogMetrics(t *testing.T) {
	t.Parallel()
	onStatusDatabases(t, func(t *testing.T, db statusDB) {
		db.exec(t, `INSERT INTO outbox_dead_letters (event_id, source, reason, attempts, created_at) VALUES ($1, 'billing', 'x', 1, `+
			db.now()+`)`, uuid.NewString())
		db.position(t, "billing", "orders", "7", 4, uuid.New(), time.Minute)
		db.exec(t, `INSERT INTO outbox_scheduled_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id,
			payload, deliver_at) VALUES ($1, 'order.reminded', 1, 'orders', 'Order', '8', '{}', `+db.at(time.Hour)+`)`, uuid.NewString())
		r := startRelay(t, "relay", "--database-url", db.URL, "--broker", "mem://", "--metrics-addr", "127.0.0.1:0",
			"--poll-interval", "20ms", "--log-format", "json")
		addr := r.opsAddr(t)
		var body string
		require.Eventually(t, func() bool {
			var code int
			code, body = get(t, addr, "/metrics")
			return code == http.StatusOK && metricValue(t, body, `entoutbox_dead_letters{source="consumer"}`) == 1
		}, patience, 50*time.Millisecond, "the backlog sampled; logs:\n%s", r.logs)
		require.Equal(t, 1.0, metricValue(t, body, `entoutbox_consumer_held_aggregates{consumer="billing"}`))
		require.Equal(t, 1.0, metricValue(t, body, "entoutbox_scheduled_waiting_events"))
		require.Zero(t, metricValue(t, body, "entoutbox_outbox_oldest_pending_age_seconds"))
		require.Zero(t, metricValue(t, body, "entoutbox_backlog_sample_errors_total"))
		require.Eventually(t, func() bool {
			_, body = get(t, addr, "/metrics")
			return metricValue(t, body, "entoutbox_relays_holding_partitions") == 1
		}, patience, 50*time.Millisecond, "the relay leases its partitions; logs:\n%s", r.logs)
		out, err := run(t, nil, "status", "--database-url", db.URL)
		require.NoError(t, err)
		kind := "fast"
		if db.mysql {
			kind = "poll"
		}
		require.Regexp(t, `\n`+kind+` relays:         1, sharing \d+ partitions\n  \S+ owns \d+ \(every topic\), lease until `, out)
		require.NoError(t, r.stop())
	})
}

// On SQLite the relay serves /metrics with its own counters and no backlog
// gauges, and says so, rather than refuse to start or count failed
// samples for ever.
func TestRelayOnSQLiteServesMetricsWithoutTheBacklog(t *testing.T) {
	t.Parallel()
	url := "sqlite:" + filepath.Join(t.TempDir(), "app.db")
	db, err := sqlitedb.Open(url)
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, testent.NewClient(testent.Driver(entsql.OpenDB(dialect.SQLite, db))).Schema.Create(context.Background()))
	r := startRelay(t, "relay", "--database-url", url, "--broker", "mem://", "--metrics-addr", "127.0.0.1:0",
		"--log-format", "json")
	addr := r.opsAddr(t)
	code, body := get(t, addr, "/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, -1.0, metricValue(t, body, "entoutbox_backlog_sample_errors_total"), "no backlog watched")
	require.Contains(t, r.logs.String(), "on SQLite /metrics has the relay's counters, not the backlog gauges")
	require.NoError(t, r.stop())
}
