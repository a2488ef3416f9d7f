package console_test

import (
	"context"
	"database/sql"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/console"
	"github.com/entoutbox/entoutbox/internal/mysqltest"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
)

// The overview reads the same figures on PostgreSQL and MariaDB, from the
// same code: pending per topic with the last error, the rows delivered in
// the last ten minutes, the open dead letters by reason, the consumers and
// their lag; and each event's page, its story. On MariaDB the overview
// says the fast path and the WAL slots do not apply, and the event search
// says it is PostgreSQL's.
func TestOverviewOnEveryDatabase(t *testing.T) {
	t.Parallel()
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		pgtest.Migrate(t, testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB))).Schema.Create)
		testOverview(t, db.DB, false)
	})
	t.Run("mariadb", func(t *testing.T) {
		t.Parallel()
		db, _ := mysqltest.Open(t)
		require.NoError(t, testent.NewClient(testent.Driver(entsql.OpenDB(dialect.MySQL, db))).Schema.Create(context.Background()))
		testOverview(t, db, true)
	})
}

func testOverview(t *testing.T, db *sql.DB, mysql bool) {
	at := func(offset time.Duration) string { return mysqltest.ClockAt(mysql, offset) }
	exec := func(query string, args ...any) {
		t.Helper()
		query, args = mysqltest.Rebind(mysql, query, args)
		_, err := db.Exec(query, args...)
		require.NoError(t, err, query)
	}
	exec(`INSERT INTO outbox_aggregate_sequences (topic, aggregate_type, aggregate_id, last_seq) VALUES ('orders', 'Order', '1', 4)`)
	first, later := uuid.New(), uuid.New()
	for seq := 1; seq <= 4; seq++ {
		id := uuid.New()
		if seq == 1 {
			id = first
		}
		// The first three written half an hour ago, delivered half a
		// minute ago; the last written an hour ago, failing.
		written, delivered, lastError := at(-30*time.Minute), at(-30*time.Second), any(nil)
		if seq == 4 {
			written, delivered, lastError = at(-time.Hour), "NULL", "timeout waiting for ack"
		}
		exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload,
			aggregate_seq, created_at, delivered_at, last_error) VALUES ($1, 'order.paid', 2, 'orders', 'Order', '1', '{}', $2, `+
			written+`, `+delivered+`, $3)`, id.String(), seq, lastError)
	}
	exec(`INSERT INTO outbox_consumer_positions (consumer, topic, aggregate_type, aggregate_id, last_seq, updated_at)
		VALUES ('billing', 'orders', 'Order', '1', 2, ` + at(0) + `)`)
	exec(`INSERT INTO outbox_processed_events (consumer, event_id, event_name, processed_at) VALUES ('billing', $1, 'order.paid', `+
		at(-10*time.Second)+`)`, first.String())
	exec(`INSERT INTO outbox_scheduled_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload,
		deliver_at) VALUES ($1, 'order.reminded', 1, 'orders', 'Order', '2', '{"order_id": 2}', `+at(time.Hour)+`)`, later.String())
	exec(`INSERT INTO outbox_dead_letters (event_id, source, reason, attempts, created_at) VALUES ($1, 'billing', 'ledger closed', 1, `+
		at(0)+`)`, uuid.NewString())

	c, err := console.New(console.Config{DB: db})
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	client := browserClient(t)
	status, body := get(t, client, srv.URL+"/")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `id="pending">1</div>`)
	require.Contains(t, body, `<div class="label">Delivered, last 10 min</div><div class="value">3</div>`)
	require.Regexp(t, `orders</a></td><td class="n">1</td><td>1h0m\d+s ago</td>\s*<td class="n"><span class="bad">1</span></td>`+
		`<td class="reason"><span class="bad">timeout waiting for ack</span>`, body)
	require.Contains(t, body, `id="open-letters"><a href="/dead-letters">1</a>`)
	require.Contains(t, body, "ledger closed")
	require.Regexp(t, `(?s)<table id="consumers">.*<td><a href="[^"]*">billing</a></td><td class="n">1</td>`, body)
	require.Regexp(t, `<tr><td>billing</td><td><a href="[^"]*/events\?topic=orders">orders</a></td><td class="n">2</td>`, body,
		"billing applied seq 2 of 4")
	overview := body
	// Each event's page: its story, from the outbox, the processed
	// events and the scheduled events.
	status, body = get(t, client, srv.URL+"/events/"+first.String())
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "delivered to the broker")
	require.Contains(t, body, "processed by billing")
	status, body = get(t, client, srv.URL+"/events/"+later.String())
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "emitted for later")
	require.Contains(t, body, "order.reminded")
	if !mysql {
		require.NotContains(t, overview, `id="not-applicable"`)
		return
	}
	require.Contains(t, overview, `<p class="note" id="not-applicable">Not applicable on MySQL: `+
		`fast relays (the fast path is PostgreSQL&#39;s; the poll relays share the outbox here); wal slots (the WAL path is PostgreSQL&#39;s).</p>`)
	status, body = get(t, client, srv.URL+"/events?topic=orders")
	require.Equal(t, http.StatusNotImplemented, status)
	require.Contains(t, body, "the event search reads PostgreSQL; on MySQL not yet")
}
