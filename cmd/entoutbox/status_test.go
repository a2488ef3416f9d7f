package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/promtest"
	"github.com/entoutbox/entoutbox/metrics"
)

func TestStatusJSONAndThresholds(t *testing.T) {
	t.Parallel()
	db, client := letterDB(t)
	_, err := db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, created_at)
		SELECT gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', g::text, '{}', now() - interval '90 seconds' FROM generate_series(1, 3) g;
		INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, created_at)
		VALUES (gen_random_uuid(), 'price.changed', 3, 'catalog', 'Product', 'p1', '{}', now() - interval '10 seconds')`)
	require.NoError(t, err)
	addLetter(t, client, "billing", "the billing code has a bug", time.Now())
	addLetter(t, client, "billing", "the billing code has a bug", time.Now())
	addLetter(t, client, "relay", "publishing: connection refused", time.Now())
	discarded := addLetter(t, client, "audit", "disk full", time.Now())
	require.NoError(t, client.DeadLetter.UpdateOneID(discarded.ID).SetDiscardedAt(time.Now()).SetDiscardNote("x").Exec(context.Background()))

	status := func(args ...string) (string, error) {
		return run(t, nil, append([]string{"status", "--database-url", db.URL}, args...)...)
	}
	out, err := status("--json")
	require.NoError(t, err)
	var st struct {
		Pending int64   `json:"pending"`
		Age     float64 `json:"oldest_pending_age_seconds"`
		Topics  []struct {
			Topic   string `json:"topic"`
			Pending int64  `json:"pending"`
		} `json:"topics"`
		DeadLetters struct {
			Open, Retried, Discarded int64
			BySource                 map[string]int64 `json:"by_source"`
			ByReason                 []struct {
				Source, Reason string
				Count          int64
			} `json:"by_reason"`
		} `json:"dead_letters"`
		Relays   []any    `json:"relays"`
		Problems []string `json:"problems"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.Equal(t, int64(4), st.Pending)
	require.InDelta(t, 90, st.Age, 5)
	require.Len(t, st.Topics, 2)
	require.Equal(t, "catalog", st.Topics[0].Topic)
	require.Equal(t, int64(1), st.Topics[0].Pending)
	require.Equal(t, "orders", st.Topics[1].Topic)
	require.Equal(t, int64(3), st.Topics[1].Pending)
	require.Equal(t, int64(3), st.DeadLetters.Open, "the discarded letter is not open")
	require.Equal(t, int64(1), st.DeadLetters.Discarded)
	require.Equal(t, map[string]int64{"billing": 2, "relay": 1}, st.DeadLetters.BySource)
	require.Len(t, st.DeadLetters.ByReason, 2)
	require.Equal(t, "the billing code has a bug", st.DeadLetters.ByReason[0].Reason)
	require.Equal(t, int64(2), st.DeadLetters.ByReason[0].Count)
	require.NotNil(t, st.Relays)
	require.Empty(t, st.Problems)

	out, err = status()
	require.NoError(t, err)
	require.Contains(t, out, "pending events:      4\n")
	require.Contains(t, out, "  orders: 3, oldest 1m3")
	require.Contains(t, out, "dead letters:        3\n  from billing: 2\n  from relay: 1\n")
	require.Contains(t, out, "settled letters:     0 retried, 1 discarded\n")

	// Within the thresholds: exit 0.
	_, err = status("--max-age", "5m", "--max-dead-letters", "3")
	require.NoError(t, err)
	// Past each: an error (exit 1) saying which, after the status.
	out, err = status("--max-dead-letters", "2", "--json")
	require.EqualError(t, err, "status: 3 open dead letters, more than the maximum 2")
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, []string{"3 open dead letters, more than the maximum 2"}, st.Problems)
	out, err = status("--max-age", "1m")
	require.Error(t, err)
	require.Regexp(t, `^status: the oldest pending event has waited 1m3\d\.\d+s, more than the maximum age 1m0s$`, err.Error())
	require.Contains(t, out, "pending events:      4\n")
	_, err = status("--max-age", "1m", "--max-dead-letters", "0")
	require.ErrorContains(t, err, "more than the maximum age 1m0s; 3 open dead letters, more than the maximum 0")
}

// Aggregates a consumer holds behind a dead letter show in status, text and
// JSON, per consumer with the longest held first, and in the
// entoutbox_consumer_held_aggregates gauge; positions that hold nothing do
// not.
func TestStatusShowsHeldAggregates(t *testing.T) {
	t.Parallel()
	db, _ := letterDB(t)
	_, err := db.DB.Exec(`INSERT INTO outbox_consumer_positions (consumer, topic, aggregate_type, aggregate_id, last_seq,
		held_seq, held_event_id, held_at, updated_at) VALUES
		('billing', 'orders', 'Order', '7', 4, 5, '0190a3c2-0000-7000-8000-000000000005', now() - interval '2 hours', now()),
		('billing', 'orders', 'Order', '8', 1, 2, '0190a3c2-0000-7000-8000-000000000002', now() - interval '3 hours', now()),
		('billing', 'orders', 'Order', '9', 12, NULL, NULL, NULL, now()),
		('audit', 'orders', 'Order', '7', 5, NULL, NULL, NULL, now())`)
	require.NoError(t, err)

	out, err := run(t, nil, "status", "--database-url", db.URL, "--json")
	require.NoError(t, err)
	var st struct {
		Held []struct {
			Consumer string
			Count    int64
			Oldest   []struct {
				Topic         string
				AggregateType string `json:"aggregate_type"`
				AggregateID   string `json:"aggregate_id"`
				Seq           int64
				EventID       string `json:"event_id"`
			}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.Len(t, st.Held, 1, "only billing holds aggregates")
	h := st.Held[0]
	require.Equal(t, "billing", h.Consumer)
	require.Equal(t, int64(2), h.Count)
	require.Len(t, h.Oldest, 2)
	require.Equal(t, "8", h.Oldest[0].AggregateID, "the longest held first")
	require.Equal(t, int64(2), h.Oldest[0].Seq)
	require.Equal(t, "0190a3c2-0000-7000-8000-000000000002", h.Oldest[0].EventID)
	require.Equal(t, "7", h.Oldest[1].AggregateID)

	out, err = run(t, nil, "status", "--database-url", db.URL)
	require.NoError(t, err)
	require.Contains(t, out, "held aggregates:     2 by consumer billing")
	require.Contains(t, out, "entoutbox dead-letters list --consumer billing")
	require.Contains(t, out, "  orders Order/8 behind event 0190a3c2-0000-7000-8000-000000000002 (seq 2), for 3h0m0s")
	require.NotContains(t, out, "audit")

	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	require.NoError(t, m.WatchBacklog(db.DB, metrics.BacklogConfig{MinInterval: time.Millisecond}))
	require.Equal(t, 2.0, promtest.Value(t, reg, "entoutbox_consumer_held_aggregates", "consumer", "billing"))
	_, err = db.DB.Exec(`UPDATE outbox_consumer_positions SET held_seq = NULL WHERE consumer = 'billing'`)
	require.NoError(t, err)
	require.Equal(t, 0.0, promtest.Value(t, reg, "entoutbox_consumer_held_aggregates", "consumer", "billing"),
		"a consumer that held aggregates reports 0 once they are released")
}
