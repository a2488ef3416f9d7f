package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/admin"
	"github.com/entoutbox/entoutbox/console"
)

// shopTables sets up a console on the outbox table shop_outbox and the
// dead-letter table shop_letters, made like the default ones, which stay
// beside them with decoys: a page that read the default tables would show
// these. It returns the decoys' event ids.
func shopTables(t *testing.T) (*env, []uuid.UUID) {
	t.Helper()
	e := setup(t, console.Config{Table: "shop_outbox", DeadLetterTable: "shop_letters"})
	_, err := e.db.DB.Exec(`CREATE TABLE shop_outbox (LIKE outbox_events INCLUDING ALL);
		CREATE TABLE shop_letters (LIKE outbox_dead_letters INCLUDING ALL);
		INSERT INTO outbox_dead_letters (event_id, source, event_name, event_version, topic, aggregate_type,
			aggregate_id, payload, reason, attempts)
		SELECT gen_random_uuid(), 'relay', 'order.paid', 1, 'orders', 'Order', 'decoy', '{}', 'a decoy letter', 1
		FROM generate_series(1, 4)`)
	require.NoError(t, err)
	var decoys []uuid.UUID
	rows, err := e.db.DB.Query(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type,
			aggregate_id, payload)
		SELECT gen_random_uuid(), 'order.paid', 1, 'orders', 'Order', 'shop-1', '{}' FROM generate_series(1, 7)
		RETURNING event_id`)
	require.NoError(t, err)
	for rows.Next() {
		var id uuid.UUID
		require.NoError(t, rows.Scan(&id))
		decoys = append(decoys, id)
	}
	require.NoError(t, rows.Err())
	return e, decoys
}

// shopLetter writes a relay dead letter to shop_letters and returns its id
// and event id.
func shopLetter(t *testing.T, e *env) (int64, uuid.UUID) {
	t.Helper()
	var (
		id      int64
		eventID = uuid.New()
	)
	require.NoError(t, e.db.DB.QueryRow(`INSERT INTO shop_letters (event_id, source, event_name, event_version, topic,
			aggregate_type, aggregate_id, payload, headers, reason, attempts)
		VALUES ($1, 'relay', 'order.paid', 1, 'orders', 'Order', 'shop-9', '{"order_id":9}', '{}', 'the shop broker refused it', 5)
		RETURNING id`, eventID).Scan(&id))
	return id, eventID
}

// Every page and the search read the tables the console is configured
// with, not the default ones, and a retry writes the event back to the
// configured outbox table.
func TestConsoleReadsTheConfiguredTables(t *testing.T) {
	t.Parallel()
	e, decoys := shopTables(t)
	shop := e.emit(t, "orders", "Order", "shop-1", `{"order_id":1}`, 3)
	letter, letterEvent := shopLetter(t, e)
	client := browserClient(t)

	status, body := get(t, client, e.srv.URL+"/")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `id="pending">3<`, "the configured outbox's backlog")
	require.Regexp(t, `id="open-letters"><a [^>]*>1<`, body, "the configured dead letters")

	// The search: by aggregate (a bounded scan), and every event.
	for _, q := range []string{"aggregate_id=shop-1", "event=order.paid", "from=1h"} {
		status, body = get(t, client, e.srv.URL+"/events?"+q)
		require.Equal(t, http.StatusOK, status, body)
		for _, id := range shop {
			require.Contains(t, body, id.String(), q)
		}
		for _, id := range decoys {
			require.NotContains(t, body, id.String(), "%s: an event of the default outbox table", q)
		}
	}
	status, body = get(t, client, e.srv.URL+"/events?aggregate_id=nobody")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `CREATE INDEX CONCURRENTLY &#34;shop_outbox_aggregate&#34; ON &#34;shop_outbox&#34;`,
		"the advice names the table")

	// An event's page: the configured table's events only.
	status, body = get(t, client, e.srv.URL+"/events/"+shop[0].String())
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `id="state">pending<`)
	status, _ = get(t, client, e.srv.URL+"/events/"+decoys[0].String())
	require.Equal(t, http.StatusNotFound, status, "an event of the default outbox table")

	// The dead letters: the list and a letter's page (whose id the default
	// table has too).
	status, body = get(t, client, e.srv.URL+"/dead-letters")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "the shop broker refused it")
	require.NotContains(t, body, "a decoy letter")
	page := e.srv.URL + "/dead-letters/" + strconv.FormatInt(letter, 10)
	status, body = get(t, client, page)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "the shop broker refused it")
	require.Contains(t, body, letterEvent.String())

	// A retry rebuilds the event in the configured outbox table.
	status, body = post(t, client, e.srv.URL+"/dead-letters/retry", url.Values{"csrf": {csrfOf(t, body)},
		"id": {strconv.FormatInt(letter, 10)}})
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, string(admin.Rebuilt))
	require.Equal(t, admin.StateRetried, e.reload(t, letter).State())
	var inShop, inDefault int
	require.NoError(t, e.db.DB.QueryRow(`SELECT (SELECT count(*) FROM shop_outbox WHERE event_id = $1),
		(SELECT count(*) FROM outbox_events WHERE event_id = $1)`, letterEvent).Scan(&inShop, &inDefault))
	require.Equal(t, 1, inShop, "the event is back in the configured outbox table")
	require.Zero(t, inDefault)
	status, body = get(t, client, e.srv.URL+"/")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `id="pending">4<`, "the retried event is pending in the configured outbox")
}

// A row the WAL path delivered keeps delivered_at NULL: the event page and
// the search show it delivered, by the progress the WAL relay recorded
// beside the configured outbox table, and a row it did not deliver
// pending.
func TestConsoleShowsWALDeliveredRowsAsDelivered(t *testing.T) {
	t.Parallel()
	e, _ := shopTables(t)
	// A WAL relay's progress: the rows written after its slot's creation
	// and before its delivered snapshot were delivered.
	_, err := e.db.DB.Exec(`CREATE TABLE shop_outbox_wal_progress (slot text PRIMARY KEY, created pg_snapshot,
			delivered pg_snapshot, confirmed_lsn pg_lsn, updated_at timestamptz NOT NULL DEFAULT now());
		INSERT INTO shop_outbox_wal_progress (slot, created) VALUES ('shop', pg_current_snapshot())`)
	require.NoError(t, err)
	delivered := e.emit(t, "orders", "Order", "shop-1", `{"order_id":1}`, 1)[0]
	_, err = e.db.DB.Exec(`UPDATE shop_outbox_wal_progress SET delivered = pg_current_snapshot()`)
	require.NoError(t, err)
	pending := e.emit(t, "orders", "Order", "shop-1", `{"order_id":2}`, 1)[0]
	client := browserClient(t)

	status, body := get(t, client, e.srv.URL+"/events/"+delivered.String())
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `id="state">delivered<`)
	require.Contains(t, body, "by the WAL path")
	status, body = get(t, client, e.srv.URL+"/events/"+pending.String())
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `id="state">pending<`)

	status, body = get(t, client, e.srv.URL+"/events?aggregate_id=shop-1")
	require.Equal(t, http.StatusOK, status, body)
	row := func(id uuid.UUID) string {
		m := regexp.MustCompile(`(?s)<tr><td>\d+</td><td><a [^>]*>` + id.String() + `</a>.*?</tr>`).FindString(body)
		require.NotEmpty(t, m, "the results list %s", id)
		return m
	}
	require.Contains(t, row(delivered), "by the WAL path")
	require.NotContains(t, row(delivered), "pending")
	require.Contains(t, row(pending), "pending")
	require.Equal(t, 1, strings.Count(body, "by the WAL path"))
}
