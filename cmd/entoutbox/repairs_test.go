package main

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/ent"
	"github.com/entoutbox/entoutbox/internal/mysqltest"
	"github.com/entoutbox/entoutbox/internal/promtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/metrics"
)

// `dead-letters discard` of a held aggregate's letters skips their events:
// the command says where the position went, and status, its JSON and the
// held-aggregates gauge agree with the letters left open after each step.
func TestDiscardSkipsTheHeldEventAndSaysWhere(t *testing.T) {
	t.Parallel()
	db, client := letterDB(t)
	held, behind := uuid.New(), uuid.New()
	heldLetter, behindLetter := addHeldLetter(t, client, held, 2), addHeldLetter(t, client, behind, 3)
	_, err := db.DB.Exec(`INSERT INTO outbox_consumer_positions (consumer, topic, aggregate_type, aggregate_id, last_seq,
		held_seq, held_event_id, held_at, waiting_seq, updated_at) VALUES ('billing', 'orders', 'Order', '9', 1, 2, $1, now(), 3, now())`, held)
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	require.NoError(t, m.WatchBacklog(db.DB, metrics.BacklogConfig{MinInterval: time.Millisecond}))
	// agree checks status (text and JSON), and the gauge, against the
	// aggregate held at seq (0: not held) behind event id.
	agree := func(seq int64, id uuid.UUID, open int) {
		t.Helper()
		out, err := run(t, nil, "status", "--database-url", db.URL, "--json")
		require.NoError(t, err)
		var st struct {
			DeadLetters struct{ Open int } `json:"dead_letters"`
			Held        []struct {
				Count  int64
				Oldest []struct {
					Seq     int64
					EventID string `json:"event_id"`
				}
			}
		}
		require.NoError(t, json.Unmarshal([]byte(out), &st), out)
		require.Equal(t, open, st.DeadLetters.Open, "open letters")
		gauge := promtest.Value(t, reg, "entoutbox_consumer_held_aggregates", "consumer", "billing")
		text, err := run(t, nil, "status", "--database-url", db.URL)
		require.NoError(t, err)
		if seq == 0 {
			require.Empty(t, st.Held)
			require.Zero(t, gauge)
			require.NotContains(t, text, "held aggregates")
			return
		}
		require.Len(t, st.Held, 1)
		require.Equal(t, seq, st.Held[0].Oldest[0].Seq)
		require.Equal(t, id.String(), st.Held[0].Oldest[0].EventID)
		require.Equal(t, 1.0, gauge)
		require.Contains(t, text, "held aggregates:     1 by consumer billing (later events wait until the held event is applied: "+
			"retry its letter, or discard it to skip the event")
		require.Contains(t, text, "orders Order/9 behind event "+id.String()+" (seq "+strconv.FormatInt(seq, 10)+")")
	}
	agree(2, held, 2)

	out, err := run(t, nil, "dead-letters", "discard", heldLetter, "--note", "refunded by hand", "--database-url", db.URL)
	require.NoError(t, err)
	require.Contains(t, out, "  position of billing on orders Order/9: at seq 2, held at seq 3 behind its open dead letter "+
		"(retry it, or discard it to skip it)\n")
	agree(3, behind, 1)

	out, err = run(t, nil, "dead-letters", "discard", behindLetter, "--note", "refunded by hand", "--database-url", db.URL)
	require.NoError(t, err)
	require.Contains(t, out, "  position of billing on orders Order/9: at seq 3, not held: its later events are applied\n")
	agree(0, uuid.Nil, 0)
	var last, waiting int64
	require.NoError(t, db.DB.QueryRow(`SELECT last_seq, coalesce(waiting_seq, 0) FROM outbox_consumer_positions`).Scan(&last, &waiting))
	require.Equal(t, int64(3), last)
	require.Zero(t, waiting, "nothing waits for seq 3 any more")
}

// The same repairs on MariaDB: `dead-letters list` and `discard` take a
// mysql:// URL, and the discards move the held position as on PostgreSQL
// (settled in steps there: locked, read, written).
func TestDiscardSkipsTheHeldEventOnMariaDB(t *testing.T) {
	t.Parallel()
	db, url := mysqltest.Open(t)
	app := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.MySQL, db)))
	require.NoError(t, app.Schema.Create(context.Background()))
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.MySQL, db)))
	held, behind := uuid.New(), uuid.New()
	heldLetter, behindLetter := addHeldLetter(t, client, held, 2), addHeldLetter(t, client, behind, 3)
	_, err := db.Exec(`INSERT INTO outbox_consumer_positions (consumer, topic, aggregate_type, aggregate_id, last_seq,
		held_seq, held_event_id, held_at, waiting_seq, updated_at)
		VALUES ('billing', 'orders', 'Order', '9', 1, 2, ?, UTC_TIMESTAMP(6), 3, UTC_TIMESTAMP(6))`, held)
	require.NoError(t, err)

	out, err := run(t, nil, "dead-letters", "list", "--state", "open", "--database-url", url)
	require.NoError(t, err)
	require.Contains(t, out, held.String())
	require.Contains(t, out, behind.String())

	out, err = run(t, nil, "dead-letters", "discard", heldLetter, "--note", "refunded by hand", "--database-url", url)
	require.NoError(t, err)
	require.Contains(t, out, "  position of billing on orders Order/9: at seq 2, held at seq 3 behind its open dead letter "+
		"(retry it, or discard it to skip it)\n")

	out, err = run(t, nil, "dead-letters", "discard", behindLetter, "--note", "refunded by hand", "--database-url", url)
	require.NoError(t, err)
	require.Contains(t, out, "  position of billing on orders Order/9: at seq 3, not held: its later events are applied\n")
	var last, waiting int64
	require.NoError(t, db.QueryRow(`SELECT last_seq, coalesce(waiting_seq, 0) FROM outbox_consumer_positions`).Scan(&last, &waiting))
	require.Equal(t, int64(3), last)
	require.Zero(t, waiting, "nothing waits for seq 3 any more")

	_, err = run(t, nil, "replay", "--database-url", url, "--broker", "mem://", "--event", "order.paid", "--since", "1h")
	require.ErrorContains(t, err, "on MySQL/MariaDB replay needs PostgreSQL for now")
}

// addHeldLetter writes billing's dead letter of event id, seq seq of
// aggregate Order/9, and returns its id as the commands take it.
func addHeldLetter(t *testing.T, client *ent.Client, id uuid.UUID, seq int64) string {
	t.Helper()
	d, err := client.DeadLetter.Create().SetEventID(id).SetSource("billing").SetEventName("order.paid").
		SetEventVersion(2).SetTopic("orders").SetAggregateType("Order").SetAggregateID("9").SetAggregateSeq(seq).
		SetPayload([]byte(`{"order_id":9,"amount_cents":5,"currency":"EUR"}`)).SetReason("ledger closed").
		SetAttempts(1).SetCreatedAt(time.Now()).Save(context.Background())
	require.NoError(t, err)
	return strconv.FormatInt(d.ID, 10)
}
