package console_test

import (
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/console"
	"github.com/entoutbox/entoutbox/outbox"
	"github.com/entoutbox/entoutbox/schema"
)

// The overview lists each consumer's lag per topic: the events past its
// positions (aggregates without one count whole) and when the oldest was
// written; 0 once it handled everything.
func TestOverviewShowsConsumerLag(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	c := browserClient(t)
	_, body := get(t, c, e.srv.URL+"/")
	require.NotContains(t, body, `id="lag"`, "no positions, no table")

	rows := make([]outbox.Row, 3)
	for i := range rows {
		rows[i] = outbox.Row{EventID: uuid.New(), Event: outbox.Event{Name: "order.paid", Version: 1, Topic: "orders",
			AggregateType: "Order", AggregateID: []string{"1", "1", "2"}[i], Payload: []byte(`{}`)}}
	}
	q, args, err := outbox.InsertNumberedQuery(schema.OutboxTable, schema.AggregateSequenceTable, rows)
	require.NoError(t, err)
	_, err = e.db.DB.Exec(q, args...)
	require.NoError(t, err)
	_, err = e.db.DB.Exec(`UPDATE outbox_events SET created_at = now() - interval '2 hours' WHERE aggregate_id = '1' AND aggregate_seq = 2;
		INSERT INTO outbox_consumer_positions (consumer, topic, aggregate_type, aggregate_id, last_seq, updated_at)
		VALUES ('billing', 'orders', 'Order', '1', 1, now())`)
	require.NoError(t, err)
	status, body := get(t, c, e.srv.URL+"/")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `id="lag"`)
	require.Regexp(t, `<tr><td>billing</td><td><a href="[^"]*/events\?topic=orders">orders</a></td><td class="n">2</td>\s*<td>2h0m\d+s ago</td></tr>`, body,
		"Order/1 seq 2, Order/2 (no position) seq 1; the oldest Order/1 seq 2")

	_, err = e.db.DB.Exec(`UPDATE outbox_consumer_positions SET last_seq = 2;
		INSERT INTO outbox_consumer_positions (consumer, topic, aggregate_type, aggregate_id, last_seq, updated_at)
		VALUES ('billing', 'orders', 'Order', '2', 1, now())`)
	require.NoError(t, err)
	_, body = get(t, c, e.srv.URL+"/")
	require.Regexp(t, `<tr><td>billing</td><td><a href="[^"]*/events\?topic=orders">orders</a></td><td class="n">0</td>\s*<td>—</td></tr>`, body)
}
