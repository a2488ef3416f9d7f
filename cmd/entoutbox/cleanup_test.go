package main

import (
	"context"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
)

// A negative retention would reach into the future and delete every
// record: cleanup refuses it, and deletes nothing.
func TestCleanupRefusesNegativeRetention(t *testing.T) {
	db := pgtest.New(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	require.NoError(t, client.Schema.Create(context.Background()))
	_, err := db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id,
			payload, delivered_at)
		SELECT gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', g::text, '{}', now() FROM generate_series(1, 3) g;
		INSERT INTO outbox_processed_events (consumer, event_id, event_name, processed_at)
		SELECT 'billing', gen_random_uuid(), 'order.paid', now() FROM generate_series(1, 3)`)
	require.NoError(t, err)
	for args, want := range map[string][]string{
		"--delivered-retention -1h0m0s: must not be negative (0 keeps every delivered row)": {"--delivered-retention", "-1h"},
		"--processed-retention -1h0m0s: must not be negative":                               {"--processed-retention", "-1h"},
	} {
		_, err := run(t, nil, append([]string{"cleanup", "--database-url", db.URL}, want...)...)
		require.EqualError(t, err, args)
	}
	var outbox, processed int
	require.NoError(t, db.DB.QueryRow(`SELECT (SELECT count(*) FROM outbox_events), (SELECT count(*) FROM outbox_processed_events)`).
		Scan(&outbox, &processed))
	require.Equal(t, 3, outbox)
	require.Equal(t, 3, processed)
}
