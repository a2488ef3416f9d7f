package main

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/pgdial"
	"github.com/entoutbox/entoutbox/internal/pgschema"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
)

// A relay under load, its metrics scraped and its scheduled events'
// promoter running, never holds more connections than --max-connections:
// its LISTEN, its liveness lock, its claims, the promoter's LISTEN and
// its other statements all come out of that pool. Counted in
// pg_stat_activity by the application_name its URL gives it, polling
// while it works.
func TestRelayHoldsAtMostMaxConnections(t *testing.T) {
	t.Parallel()
	db := outboxDB(t)
	name := "entoutbox relay " + db.Schema[len(db.Schema)-8:] // unique, and within its 63 bytes
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	u.RawQuery += "&application_name=" + url.PathEscape(name) // pgx reads no + as a space
	const bound = minRelayConns
	r := startRelay(t, "relay", "--database-url", u.String(), "--broker", "mem://", "--max-connections", "6",
		"--metrics-addr", "127.0.0.1:0", "--poll-interval", "20ms", "--batch-size", "20", "--log-format", "json")

	counter, err := pgschema.Open(db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { counter.Close() })
	counter.SetMaxOpenConns(1)
	var peak atomic.Int64
	stop := make(chan struct{})
	counted := make(chan struct{})
	go func() {
		defer close(counted)
		for {
			var n int64
			if err := counter.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, name).Scan(&n); err == nil &&
				n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	// Scrapes, each reading the backlog, on top of the relay's own work.
	addr := r.opsAddr(t)
	for range 4 {
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	// Rows of many aggregates, committed in many transactions while the
	// relay sends them; scheduled events due at once, for the promoter.
	for i := range 40 {
		_, err := db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload)
			SELECT gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', (g % 17)::text, '{"order_id": 1}' FROM generate_series(1, 50) g;
			INSERT INTO outbox_scheduled_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, deliver_at)
			SELECT gen_random_uuid(), 'order.paid', 2, 'later', 'Order', g::text, '{"order_id": 1}', clock_timestamp()
			FROM generate_series(1, 5) g`)
		require.NoError(t, err, "batch %d", i)
	}
	require.Eventually(t, func() bool {
		var pending int
		require.NoError(t, db.DB.QueryRow(`SELECT (SELECT count(*) FROM outbox_events WHERE delivered_at IS NULL) +
			(SELECT count(*) FROM outbox_scheduled_events)`).Scan(&pending))
		return pending == 0
	}, patience, 20*time.Millisecond, "the relay sent every row")
	close(stop)
	<-counted
	t.Logf("peak: %d connections", peak.Load())
	require.GreaterOrEqual(t, peak.Load(), int64(3), "the count did not see the relay's connections")
	require.LessOrEqual(t, peak.Load(), int64(bound), "the relay held more connections than --max-connections")
}

// A relay started on a server with no room for another connection (too
// many clients) waits for one, saying so, instead of ending; once a
// connection is let go it starts and sends. On a private server: the
// shared one is never filled.
func TestRelayWaitsForRoomOnAFullServer(t *testing.T) {
	t.Parallel()
	p := pgtest.StartPrivate(t, "max_connections=10", "superuser_reserved_connections=0")
	admin := p.Open(t)
	_, err := admin.Exec(`CREATE DATABASE app`)
	require.NoError(t, err)
	appURL := strings.Replace(p.URL, "/postgres?", "/app?", 1)
	appDB, err := pgschema.Open(appURL)
	require.NoError(t, err)
	t.Cleanup(func() { appDB.Close() })
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, appDB)))
	pgtest.Migrate(t, client.Schema.Create)
	_, err = appDB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload)
		VALUES (gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', '1', '{"order_id": 1}')`)
	require.NoError(t, err)

	// Every other connection taken, but one this test reads with.
	filler, err := sql.Open("pgx", appURL)
	require.NoError(t, err)
	t.Cleanup(func() { filler.Close() })
	filler.SetMaxIdleConns(0) // a connection let go ends
	appDB.SetMaxOpenConns(1)
	require.NoError(t, appDB.Ping())
	admin.Close()
	var held []*sql.Conn
	for {
		c, err := filler.Conn(context.Background())
		if err != nil {
			require.True(t, pgdial.TooManyClients(err), "filling the server: %v", err)
			break
		}
		require.NoError(t, c.PingContext(context.Background()))
		held = append(held, c)
	}

	r := startRelay(t, "relay", "--database-url", appURL, "--broker", "mem://", "--poll-interval", "20ms", "--max-connections", "6")
	require.Eventually(t, func() bool {
		return strings.Contains(r.logs.String(), "PostgreSQL has no room for another connection; waiting for one")
	}, patience, 20*time.Millisecond, "the relay did not say it waits; logs:\n%s", r.logs)
	// Room for the relay's pool, and the row goes.
	for _, c := range held[:6] {
		require.NoError(t, c.Close())
	}
	require.Eventually(t, func() bool {
		var pending int
		require.NoError(t, appDB.QueryRow(`SELECT count(*) FROM outbox_events WHERE delivered_at IS NULL`).Scan(&pending))
		return pending == 0
	}, patience, 20*time.Millisecond, "the relay did not send once there was room; logs:\n%s", r.logs)
	require.Contains(t, r.logs.String(), "PostgreSQL took the connection")
}
