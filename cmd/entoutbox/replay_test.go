package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/relay/fleet"
)

func TestReplayCommandPublishesInOrderToAnotherTopic(t *testing.T) {
	t.Parallel()
	db, _ := letterDB(t)
	ctx, topic, msgs := replayTopic(t, "_rebuild")

	// Six delivered events over two aggregates, one pending, one of another
	// event and one written before --since: six go out.
	_, err := db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers, delivered_at)
		SELECT gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', (g % 2)::text, jsonb_build_object('order_id', g), '{"trace":"t1"}', now()
		FROM generate_series(1, 6) g;
		INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload) VALUES
			(gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', '1', '{"order_id": 7}');
		INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, delivered_at) VALUES
			(gen_random_uuid(), 'price.changed', 3, 'catalog', 'Product', 'p', '{}', now()),
			(gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', '1', '{"order_id": 0}', now());
		UPDATE outbox_events SET created_at = now() - interval '2 days' WHERE payload->>'order_id' = '0'`)
	require.NoError(t, err)
	var want []string
	rows, err := db.DB.Query(`SELECT event_id FROM outbox_events WHERE delivered_at IS NOT NULL AND event_name = 'order.paid'
		AND created_at > now() - interval '1 hour' ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		want = append(want, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, want, 6)

	_, err = run(t, nil, "replay", "--database-url", db.URL, "--broker", replayBrokerURL, "--event", "order.paid")
	require.EqualError(t, err, "replay needs --since: the first event's time (RFC 3339, a date, or a duration ago)")
	out, err := run(t, nil, "replay", "--database-url", db.URL, "--broker", replayBrokerURL,
		"--event", "order.paid", "--since", "1h", "--to-topic", topic, "--batch-size", "4")
	require.NoError(t, err)
	require.Equal(t, "replayed 6 events\n", out)

	var got []*message.Message
	for len(got) < 6 {
		select {
		case m := <-msgs:
			m.Ack()
			got = append(got, m)
		case <-ctx.Done():
			t.Fatalf("received %d of 6 replayed events", len(got))
		}
	}
	for i, m := range got {
		require.Equal(t, want[i], m.UUID, "original ids, in the order they were written")
		require.Equal(t, "order.paid", m.Metadata.Get("outbox_event_name"))
		require.Equal(t, "2", m.Metadata.Get("outbox_event_version"))
		require.Equal(t, "Order", m.Metadata.Get("outbox_aggregate_type"))
		require.NotEmpty(t, m.Metadata.Get("outbox_created_at"))
		require.Equal(t, "t1", m.Metadata.Get("trace"))
	}
	select {
	case m := <-msgs:
		t.Fatalf("a seventh message: %s %s", m.UUID, m.Payload)
	case <-time.After(300 * time.Millisecond):
	}
}

// replay --table reads the outbox table it names: its delivered rows, those
// the WAL path delivered (by the progress table named after it) among
// them, and none of the default table's.
func TestReplayCommandReadsTheTableGiven(t *testing.T) {
	t.Parallel()
	db, _ := letterDB(t)
	shopTables(t, db)
	ctx, topic, msgs := replayTopic(t, "_shop")

	insert := func(table string, delivered bool) string {
		t.Helper()
		var id string
		require.NoError(t, db.DB.QueryRow(`INSERT INTO `+table+` (event_id, event_name, event_version, topic, aggregate_type,
			aggregate_id, payload, delivered_at) VALUES (gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', '1', '{}',
			CASE WHEN $1 THEN now() END) RETURNING event_id`, delivered).Scan(&id))
		return id
	}
	for range 3 {
		insert("outbox_events", true) // the default table's: never replayed
	}
	want := []string{insert("shop_outbox", true)}
	insert("shop_outbox", false) // pending
	_, err := db.DB.Exec(`CREATE TABLE shop_outbox_wal_progress (slot text PRIMARY KEY, created pg_snapshot,
			delivered pg_snapshot, confirmed_lsn pg_lsn, updated_at timestamptz NOT NULL DEFAULT now());
		INSERT INTO shop_outbox_wal_progress (slot, created) VALUES ('shop', pg_current_snapshot())`)
	require.NoError(t, err)
	want = append(want, insert("shop_outbox", false)) // delivered by the WAL path
	_, err = db.DB.Exec(`UPDATE shop_outbox_wal_progress SET delivered = pg_current_snapshot()`)
	require.NoError(t, err)
	want = append(want, insert("shop_outbox", true))

	out, err := run(t, nil, "replay", "--database-url", db.URL, "--table", "shop_outbox", "--broker", replayBrokerURL,
		"--event", "order.paid", "--since", "1h", "--to-topic", topic)
	require.NoError(t, err)
	require.Equal(t, "replayed 3 events\n", out)
	var got []string
	for len(got) < len(want) {
		select {
		case m := <-msgs:
			m.Ack()
			got = append(got, m.UUID)
		case <-ctx.Done():
			t.Fatalf("received %d of %d replayed events", len(got), len(want))
		}
	}
	require.Equal(t, want, got)
	select {
	case m := <-msgs:
		t.Fatalf("a fourth message: %s", m.UUID)
	case <-time.After(300 * time.Millisecond):
	}
}

const replayBrokerURL = "amqp://guest:guest@127.0.0.1:5672/"

// replayTopic is a topic of the test's own, ending in suffix, subscribed to
// on RabbitMQ, and a context bounded by patience; both end with the test.
func replayTopic(t *testing.T, suffix string) (context.Context, string, <-chan *message.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	t.Cleanup(cancel)
	br, err := broker.Open(ctx, replayBrokerURL, broker.Options{})
	if err != nil {
		pgtest.Unavailable(t, "RabbitMQ at 127.0.0.1:5672", err)
	}
	t.Cleanup(func() { _ = br.Close() })
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	topic := "t" + hex.EncodeToString(b) + suffix
	sub, err := br.Subscriber("read-model")
	require.NoError(t, err)
	msgs, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	return ctx, topic, msgs
}

// replay --databases-file --tenant replays that tenant's database of the
// fleet's file, each event carrying the tenant as the fleet's relay sends
// it; a tenant not in the file, or a bad name, is refused.
func TestReplayCommandTenantOfTheDatabasesFile(t *testing.T) {
	t.Parallel()
	db, _ := letterDB(t)
	ctx, topic, msgs := replayTopic(t, "_tenant")
	_, err := db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, delivered_at)
		SELECT gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', g::text, '{}', now() FROM generate_series(1, 3) g`)
	require.NoError(t, err)
	file := writeDatabasesFile(t, fleet.Tenant{Name: "acme", DatabaseURL: pgtest.ServerURL(), Schema: db.Schema})

	_, err = run(t, nil, "replay", "--databases-file", file, "--broker", replayBrokerURL, "--event", "order.paid", "--since", "1h")
	require.EqualError(t, err, "--databases-file needs --tenant: the tenant whose database is replayed")
	_, err = run(t, nil, "replay", "--databases-file", file, "--tenant", "globex", "--broker", replayBrokerURL,
		"--event", "order.paid", "--since", "1h")
	require.ErrorContains(t, err, `--tenant "globex" is not a tenant of --databases-file`)
	_, err = run(t, nil, "replay", "--tenant", "no spaces", "--broker", replayBrokerURL, "--event", "order.paid", "--since", "1h")
	require.ErrorContains(t, err, "--tenant: ")
	out, err := run(t, nil, "replay", "--databases-file", file, "--tenant", "acme", "--broker", replayBrokerURL,
		"--event", "order.paid", "--since", "1h", "--to-topic", topic)
	require.NoError(t, err)
	require.Equal(t, "replayed 3 events\n", out)
	for range 3 {
		select {
		case m := <-msgs:
			m.Ack()
			require.Equal(t, "acme", m.Metadata.Get(events.MetaTenant), "a replayed event carries its tenant")
		case <-ctx.Done():
			t.Fatal("the replayed events did not arrive")
		}
	}
}
