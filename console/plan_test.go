package console

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/ent"
	"github.com/entoutbox/entoutbox/internal/pgtest"
)

// TestSearchQueryPlans checks which index serves each of the console's
// queries on a table of delivered rows, as docs/operations.md states. Set
// CONSOLE_PLAN_ROWS (say 2000000) to time them on a bigger table.
func TestSearchQueryPlans(t *testing.T) {
	t.Parallel()
	n := 30_000
	if s := os.Getenv("CONSOLE_PLAN_ROWS"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	db := pgtest.New(t)
	ctx := context.Background()
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	pgtest.Migrate(t, client.Schema.Create)
	// n delivered events 10 ms apart ending now, 5,000 aggregates, two
	// consumers that processed them all.
	_, err := db.DB.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type,
			aggregate_id, payload, created_at, available_at, delivered_at)
		SELECT gen_random_uuid(), CASE WHEN g % 10 = 0 THEN 'order.refunded' ELSE 'order.paid' END, 1,
			CASE WHEN g % 2 = 0 THEN 'orders' ELSE 'payments' END, CASE WHEN g % 3 = 0 THEN 'Payment' ELSE 'Order' END,
			(g % 5000)::text, '{"amount_cents":4200}', now() - ($1 - g) * interval '10 ms', now(),
			now() - ($1 - g) * interval '10 ms' + interval '2 ms'
		FROM generate_series(1, $1) g`, n)
	require.NoError(t, err)
	_, err = db.DB.ExecContext(ctx, `INSERT INTO outbox_processed_events (consumer, event_id, event_name, processed_at)
		SELECT c, event_id, event_name, delivered_at FROM outbox_events, unnest(ARRAY['audit', 'billing']) c`)
	require.NoError(t, err)
	_, err = db.DB.ExecContext(ctx, `ANALYZE outbox_events; ANALYZE outbox_processed_events`)
	require.NoError(t, err)
	c, err := New(Config{DB: db.DB})
	require.NoError(t, err)
	if int64(n) < 3*c.scanBound {
		c.scanBound = int64(n / 3) // the bound applies, as on a big table
	}
	var some uuid.UUID
	require.NoError(t, db.DB.QueryRowContext(ctx, `SELECT event_id FROM outbox_events WHERE id = $1`, n/2).Scan(&some))

	explain := func(name, query string, args []any, want ...string) {
		t.Helper()
		rows, err := db.DB.QueryContext(ctx, "EXPLAIN (ANALYZE, FORMAT TEXT) "+query, args...)
		require.NoError(t, err, name)
		var plan []string
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			plan = append(plan, line)
		}
		require.NoError(t, rows.Err())
		rows.Close()
		text := strings.Join(plan, "\n")
		for _, w := range want {
			require.Contains(t, text, w, "%s:\n%s", name, text)
		}
		require.NotContains(t, text, "Seq Scan on outbox_events", "%s:\n%s", name, text)
		require.NotContains(t, text, "Seq Scan on outbox_processed_events", "%s:\n%s", name, text)
		t.Logf("%s: %s", name, plan[len(plan)-1])
		if os.Getenv("CONSOLE_PLAN_SHOW") != "" {
			t.Log(text)
		}
	}
	search := func(name string, q eventQuery, want ...string) {
		t.Helper()
		var p searchPage
		start := time.Now()
		plan, err := c.planSearch(ctx, q, &p)
		require.NoError(t, err, name)
		t.Logf("%s: planned in %s (%s)", name, time.Since(start), strings.Join(p.Notes, "; "))
		explain(name, plan.sql, plan.args, want...)
	}

	explain("event by id", `SELECT * FROM outbox_events WHERE event_id = $1`, []any{some}, "outbox_events_event_id_key")
	explain("who processed it", processedByQuery(c.tables), []any{some}, "outbox_processed_events_key")
	search("newest events", eventQuery{}, "outbox_events_pkey")
	search("by event name, bounded scan", eventQuery{Event: "order.refunded"}, "outbox_events_pkey")
	search("by topic in a time range", eventQuery{Topic: "payments",
		From: time.Now().Add(-time.Duration(n/4) * 10 * time.Millisecond).UTC().Format(time.RFC3339Nano)}, "outbox_events_pkey")
	// A time range is an id range: [first id written at From, first id
	// written at To).
	var from, to time.Time
	require.NoError(t, db.DB.QueryRowContext(ctx, `SELECT (SELECT created_at FROM outbox_events WHERE id = $1),
		(SELECT created_at FROM outbox_events WHERE id = $2)`, n/4, n/2).Scan(&from, &to))
	window := eventQuery{From: from.UTC().Format(time.RFC3339Nano), To: to.UTC().Format(time.RFC3339Nano)}
	search("a time range", window, "outbox_events_pkey", "(id >= ", "(id < ")
	var p searchPage
	require.NoError(t, c.findEvents(ctx, window, &p))
	require.Len(t, p.Results, searchLimit)
	require.Equal(t, int64(n/2-1), p.Results[0].ID, "the newest event before To")
	window.Before = int64(n/4 + 10)
	p = searchPage{}
	require.NoError(t, c.findEvents(ctx, window, &p))
	require.Len(t, p.Results, 10, "paged down to From")
	require.Equal(t, int64(n/4), p.Results[9].ID, "the first event at From")
	search("by aggregate, no index: bounded scan", eventQuery{AggregateID: "4242"}, "outbox_events_pkey")
	search("a newer page, bounded scan up", eventQuery{Event: "order.refunded", After: int64(n / 2)}, "outbox_events_pkey")
	_, err = db.DB.ExecContext(ctx, `CREATE INDEX outbox_events_aggregate ON outbox_events (aggregate_type, aggregate_id); ANALYZE outbox_events`)
	require.NoError(t, err)
	search("by aggregate type and id", eventQuery{AggregateType: "Order", AggregateID: "4242"}, "outbox_events_aggregate")
	search("by aggregate id of any type", eventQuery{AggregateID: "4242"}, "outbox_events_aggregate")
	// As the overview reads them: at most rateSamples rows.
	explain("delivery rate, every row", deliveryRateQuery(c.tables), []any{n - rateSamples + 1, n, 1, rateBucket.Seconds(), rateWindow.Seconds()}, "outbox_events_pkey")
	explain("delivery rate, sampled", sampledDeliveryRateQuery(c.tables), []any{1, n, (n + rateSamples - 1) / rateSamples, rateBucket.Seconds(), rateWindow.Seconds()}, "outbox_events_pkey")
	// The sampled estimate is close to the count.
	start := time.Now()
	ch, err := c.readDeliveryRate(ctx)
	require.NoError(t, err)
	t.Logf("delivery rate: read in %s", time.Since(start))
	var exact int64
	require.NoError(t, db.DB.QueryRowContext(ctx, `SELECT count(*) FROM outbox_events WHERE delivered_at > now() - interval '10 minutes'`).Scan(&exact))
	require.Greater(t, ch.Stride, int64(1), "sampled")
	require.InEpsilon(t, exact, ch.Total, 0.05, "estimated %d delivered in the window, counted %d", ch.Total, exact)
	t.Logf("delivery rate: estimated %d delivered from one row in %d, counted %d", ch.Total, ch.Stride, exact)
	explain("consumers", consumersQuery(c.tables), nil, "outbox_processed_events_key", "outbox_processed_events_age")
}
