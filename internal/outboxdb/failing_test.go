package outboxdb_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// The failing rows are the pending ones with last_error set, by topic
// and by the fast relay holding their partition, each with its most
// frequent error (ids and numbers aside); delivered rows that failed once
// are not.
func TestReadFailing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, tables := setup(t)
	f, err := outboxdb.ReadFailing(ctx, db, tables, 0)
	require.NoError(t, err)
	require.Equal(t, outboxdb.Failing{Topics: []outboxdb.FailingRows{}, Relays: []outboxdb.FailingRows{}}, f, "no rows, no relay ever ran")

	// orders: 40 rows, 30 failed (20 for the broker's timeout naming
	// their message, 10 refused), 5 of those delivered since; payments:
	// 3 rows, none failed. Two relays share 4 partitions of every topic,
	// and a third holds the 4 of payments alone.
	_, err = db.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id,
			payload, last_error, delivered_at)
		SELECT gen_random_uuid(), 'order.paid', 1, 'orders', 'Order', g::text, '{}',
			CASE WHEN g <= 20 THEN 'publishing message ' || gen_random_uuid() || ': timeout waiting for ack'
				WHEN g <= 30 THEN 'refused: message too large' END,
			CASE WHEN g % 6 = 0 AND g <= 30 THEN now() END
		FROM generate_series(1, 40) g;
		INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload)
		SELECT gen_random_uuid(), 'payment.made', 1, 'payments', 'Payment', g::text, '{}' FROM generate_series(1, 3) g;
		CREATE TABLE outbox_events_partitions (topic text NOT NULL, partition int NOT NULL, relay text NOT NULL DEFAULT '',
			until timestamptz NOT NULL DEFAULT '-infinity', PRIMARY KEY (topic, partition));
		INSERT INTO outbox_events_partitions (topic, partition, relay)
		SELECT '', p, CASE WHEN p < 3 THEN 'a/1/1' ELSE 'b/1/1' END FROM generate_series(0, 3) p;
		INSERT INTO outbox_events_partitions (topic, partition, relay) SELECT 'payments', p, 'c/1/1' FROM generate_series(0, 3) p`)
	require.NoError(t, err)
	// Where the fast path puts each failing row: its partition of 4.
	var onA, onB int64
	require.NoError(t, db.QueryRow(`SELECT count(*) FILTER (WHERE `+outboxdb.PartitionOf("o", "4")+` < 3),
			count(*) FILTER (WHERE `+outboxdb.PartitionOf("o", "4")+` = 3)
		FROM outbox_events o WHERE last_error IS NOT NULL AND delivered_at IS NULL`).Scan(&onA, &onB))
	require.Equal(t, int64(25), onA+onB)
	require.Positive(t, onB, "the aggregates spread over the partitions")

	f, err = outboxdb.ReadFailing(ctx, db, tables, 0)
	require.NoError(t, err)
	require.Len(t, f.Topics, 1, "payments has none failing")
	orders := f.Topics[0]
	require.Equal(t, "orders", orders.Topic)
	require.Equal(t, int64(25), orders.Rows, "30 failed, 5 delivered since")
	require.Regexp(t, `^publishing message [0-9a-f-]{36}: timeout waiting for ack$`, orders.Error)
	require.Equal(t, int64(17), orders.ErrorRows, "20 timeouts, 3 of them delivered since")
	require.Len(t, f.Relays, 2)
	require.Equal(t, "a/1/1", f.Relays[0].Relay)
	require.Equal(t, "", f.Relays[0].Topic, "its share of every topic")
	require.Equal(t, onA, f.Relays[0].Rows)
	require.Equal(t, "b/1/1", f.Relays[1].Relay)
	require.Equal(t, onB, f.Relays[1].Rows)

	// Bounded: the first 35 pending rows only, of which the last 7 (31-37)
	// carry no error.
	f, err = outboxdb.ReadFailing(ctx, db, tables, 35)
	require.NoError(t, err)
	require.Equal(t, int64(25), f.Topics[0].Rows)
	f, err = outboxdb.ReadFailing(ctx, db, tables, 10)
	require.NoError(t, err)
	require.Equal(t, int64(10), f.Topics[0].Rows, "the first 10 pending rows, all failing")
}
