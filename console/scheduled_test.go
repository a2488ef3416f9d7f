package console_test

import (
	"html"
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/console"
)

// The overview shows the scheduled events: how many wait, the next due,
// those due and not moved (overdue) and those cancelled, by topic.
func TestOverviewShowsScheduledEvents(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	c := browserClient(t)
	_, body := get(t, c, e.srv.URL+"/")
	require.Contains(t, body, `<span id="scheduled-waiting">0</span> waiting;`)
	require.NotContains(t, body, `id="scheduled-overdue"`)

	_, err := e.db.DB.Exec(`INSERT INTO outbox_scheduled_events
		(event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, deliver_at, cancelled_at)
		VALUES (gen_random_uuid(), 'order.reminded', 1, 'orders', 'Order', '1', '{}', clock_timestamp() + interval '1 hour', NULL),
			(gen_random_uuid(), 'order.reminded', 1, 'mail', 'Order', '2', '{}', clock_timestamp() + interval '2 hours', NULL),
			(gen_random_uuid(), 'order.reminded', 1, 'orders', 'Order', '3', '{}', clock_timestamp() + interval '1 hour', clock_timestamp())`)
	require.NoError(t, err)
	status, body := get(t, c, e.srv.URL+"/")
	require.Equal(t, http.StatusOK, status)
	require.Regexp(t, `<span id="scheduled-waiting">2</span> waiting, the next due <span id="scheduled-next">\S+ \S+ UTC \(in (59m\d+s|1h0m0s)\)</span>;`, body)
	require.Contains(t, body, `<span id="scheduled-cancelled">1</span> cancelled`)
	require.NotContains(t, body, `id="scheduled-overdue"`)

	_, err = e.db.DB.Exec(`INSERT INTO outbox_scheduled_events
		(event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, deliver_at)
		VALUES (gen_random_uuid(), 'order.reminded', 1, 'orders', 'Order', '4', '{}', clock_timestamp() - interval '3 minutes')`)
	require.NoError(t, err)
	_, body = get(t, c, e.srv.URL+"/")
	require.Regexp(t, `<p class="bad" id="scheduled-overdue">1 overdue: due since \S+ \S+ UTC \(3m\d+s ago\) and not moved to the outbox yet`, body)
	require.Contains(t, body, `<tr><td>orders</td><td class="n">2</td><td class="n"><span class="bad">1</span></td>`)
	require.Contains(t, body, `<tr><td>mail</td><td class="n">1</td><td class="n">0</td>`)
}

// The event page of a scheduled event says when it is due while it waits,
// when it was cancelled and for when it had been scheduled, and once
// delivered the time it was due.
func TestEventPageOfAScheduledEvent(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	c := browserClient(t)
	waiting, cancelled, delivered := uuid.New(), uuid.New(), uuid.New()
	_, err := e.db.DB.Exec(`INSERT INTO outbox_scheduled_events
		(event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, deliver_at, cancelled_at)
		VALUES ($1, 'order.reminded', 1, 'orders', 'Order', '7', '{"order_id":7}', '2030-01-02 03:04:05.678+00', NULL),
			($2, 'order.reminded', 1, 'orders', 'Order', '8', '{"order_id":8}', '2030-01-02 03:04:05.678+00',
				'2029-12-31 23:00:00+00')`, waiting, cancelled)
	require.NoError(t, err)
	_, err = e.db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload,
			headers, delivered_at)
		VALUES ($1, 'order.reminded', 1, 'orders', 'Order', '9', '{"order_id":9}',
			'{"outbox_deliver_at": "2026-03-04T05:06:07.250000Z"}', '2026-03-04 05:06:07.500+00')`, delivered)
	require.NoError(t, err)

	status, body := get(t, c, e.srv.URL+"/events/"+waiting.String())
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `<dd id="state">scheduled for 2030-01-02 03:04:05.678 UTC</dd>`)
	require.Contains(t, body, `<dd id="due">2030-01-02 03:04:05.678 UTC</dd>`)
	require.Contains(t, html.UnescapeString(body), `"order_id": 7`, "the payload, from the scheduled row")
	require.Contains(t, body, "<strong>emitted for later</strong>")
	require.Contains(t, body, "Waiting in the scheduled events")

	_, body = get(t, c, e.srv.URL+"/events/"+cancelled.String())
	require.Contains(t, body, `<dd id="state">cancelled at 2029-12-31 23:00:00.000 UTC (was scheduled for 2030-01-02 03:04:05.678 UTC)</dd>`)
	require.Contains(t, body, "<strong>cancelled</strong>")

	_, body = get(t, c, e.srv.URL+"/events/"+delivered.String())
	require.Contains(t, body, `<dd id="state">delivered</dd>`)
	require.Contains(t, body, `<dd id="due">2026-03-04 05:06:07.250 UTC (delivered 250ms after)</dd>`)
	require.Contains(t, body, `<span class="at">2026-03-04 05:06:07.250 UTC</span> <strong>due</strong>`)
	require.Contains(t, body, "<strong>moved to the outbox</strong>")
	require.NotContains(t, body, "<strong>emitted</strong>", "it was emitted earlier, for later: its row is not when")

	status, _ = get(t, c, e.srv.URL+"/events/"+uuid.NewString())
	require.Equal(t, http.StatusNotFound, status)
}

// The console reads the scheduled events' table its Config names; without
// one it shows none.
func TestConsoleReadsTheConfiguredScheduledTable(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{ScheduledTable: "billing_scheduled"})
	_, err := e.db.DB.Exec(`CREATE TABLE billing_scheduled (LIKE outbox_scheduled_events INCLUDING ALL)`)
	require.NoError(t, err)
	id := uuid.New()
	_, err = e.db.DB.Exec(`INSERT INTO billing_scheduled
		(event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, deliver_at)
		VALUES ($1, 'invoice.due', 1, 'billing', 'Invoice', '1', '{}', '2030-01-02 03:04:05.678+00')`, id)
	require.NoError(t, err)
	c := browserClient(t)
	_, body := get(t, c, e.srv.URL+"/")
	require.Contains(t, body, `<span id="scheduled-waiting">1</span> waiting`)
	_, body = get(t, c, e.srv.URL+"/events/"+id.String())
	require.Contains(t, body, `<dd id="state">scheduled for 2030-01-02 03:04:05.678 UTC</dd>`)

	_, err = e.db.DB.Exec(`DROP TABLE billing_scheduled`)
	require.NoError(t, err)
	status, body := get(t, c, e.srv.URL+"/")
	require.Equal(t, http.StatusOK, status)
	require.NotContains(t, body, `id="scheduled"`)
}

// In a browser: the overview counts the scheduled event, and the search by
// its id leads to its page, which says when it is due; cancelled, it says
// so.
func TestBrowserFindsAScheduledEvent(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{Refresh: -1})
	id := uuid.New()
	_, err := e.db.DB.Exec(`INSERT INTO outbox_scheduled_events
		(event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, deliver_at)
		VALUES ($1, 'order.reminded', 1, 'orders', 'Order', '7', '{"order_id":7}', '2030-01-02 03:04:05.678+00')`, id)
	require.NoError(t, err)
	ctx := tab(t)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#scheduled-waiting"))))
	require.Equal(t, "1", text(t, ctx, "#scheduled-waiting"))
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/events"),
		chromedp.SetValue(chromedp.CSS(`input[name=event_id]`), id.String()),
		chromedp.Click(chromedp.CSS(`#search button`))))
	waitFor(t, ctx, "#state")
	require.Equal(t, "scheduled for 2030-01-02 03:04:05.678 UTC", text(t, ctx, "#state"))
	require.Contains(t, text(t, ctx, "#payload"), `"order_id": 7`)

	_, err = e.db.DB.Exec(`UPDATE outbox_scheduled_events SET cancelled_at = '2029-12-31 23:00:00+00' WHERE event_id = $1`, id)
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx, chromedp.Reload()))
	waitFor(t, ctx, "#state")
	require.Equal(t, "cancelled at 2029-12-31 23:00:00.000 UTC (was scheduled for 2030-01-02 03:04:05.678 UTC)",
		text(t, ctx, "#state"))
}
