package main

import (
	"context"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/mysqltest"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay/fleet"
)

// A negative retention would reach into the future and delete every
// record: cleanup refuses it, and deletes nothing.
func TestCleanupRefusesNegativeRetention(t *testing.T) {
	db := pgtest.New(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	pgtest.Migrate(t, client.Schema.Create)
	_, err := db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id,
			payload, delivered_at)
		SELECT gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', g::text, '{}', now() FROM generate_series(1, 3) g;
		INSERT INTO outbox_processed_events (consumer, event_id, event_name, processed_at)
		SELECT 'billing', gen_random_uuid(), 'order.paid', now() FROM generate_series(1, 3);
		INSERT INTO outbox_dead_letters (source, event_name, reason, retried_at, discarded_at) VALUES
		('billing', 'order.paid', 'x', now(), NULL), ('billing', 'order.paid', 'x', NULL, now())`)
	require.NoError(t, err)
	for args, want := range map[string][]string{
		"--delivered-retention -1h0m0s: must not be negative (0 keeps every delivered row)": {"--delivered-retention", "-1h"},
		"--processed-retention -1h0m0s: must not be negative":                               {"--processed-retention", "-1h"},
		"--settled-dead-letter-retention -1h0m0s: must not be negative (0 keeps them all)":  {"--settled-dead-letter-retention", "-1h"},
	} {
		_, err := run(t, nil, append([]string{"cleanup", "--database-url", db.URL}, want...)...)
		require.EqualError(t, err, args)
	}
	var outbox, processed, letters int
	require.NoError(t, db.DB.QueryRow(`SELECT (SELECT count(*) FROM outbox_events), (SELECT count(*) FROM outbox_processed_events),
		(SELECT count(*) FROM outbox_dead_letters)`).Scan(&outbox, &processed, &letters))
	require.Equal(t, 3, outbox)
	require.Equal(t, 3, processed)
	require.Equal(t, 2, letters)
}

// cleanup removes dead letters retried or discarded longer ago than
// --settled-dead-letter-retention, and never an open one, however old.
func TestCleanupPurgesSettledDeadLetters(t *testing.T) {
	db := pgtest.New(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	pgtest.Migrate(t, client.Schema.Create)
	_, err := db.DB.Exec(`INSERT INTO outbox_dead_letters (source, event_name, reason, created_at, retried_at, discarded_at) VALUES
		('relay', 'open-old', 'x', now() - interval '30 days', NULL, NULL),
		('billing', 'retried-old', 'x', now() - interval '30 days', now() - interval '10 days', NULL),
		('billing', 'discarded-old', 'x', now() - interval '30 days', NULL, now() - interval '10 days'),
		('billing', 'discarded-recent', 'x', now() - interval '30 days', NULL, now() - interval '1 hour')`)
	require.NoError(t, err)
	out, err := run(t, nil, "cleanup", "--database-url", db.URL, "--settled-dead-letter-retention", "168h")
	require.NoError(t, err)
	require.Contains(t, out, "deleted 2 dead letters retried or discarded more than 168h0m0s ago")
	var left []string
	rows, err := db.DB.Query(`SELECT event_name FROM outbox_dead_letters ORDER BY event_name`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		left = append(left, name)
	}
	require.Equal(t, []string{"discarded-recent", "open-old"}, left)

	out, err = run(t, nil, "cleanup", "--database-url", db.URL)
	require.NoError(t, err)
	require.NotContains(t, out, "dead letters", "0 keeps them all")
}

// cleanup removes scheduled events cancelled longer ago than
// --delivered-retention, and never a waiting one.
func TestCleanupRemovesCancelledScheduledEvents(t *testing.T) {
	db := pgtest.New(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	pgtest.Migrate(t, client.Schema.Create)
	_, err := db.DB.Exec(`INSERT INTO outbox_scheduled_events
		(event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, deliver_at, created_at, cancelled_at)
		SELECT gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', g::text, '{}', now() + interval '1 day',
			now() - interval '60 days', CASE WHEN g <= 3 THEN now() - interval '30 days' WHEN g = 4 THEN now() END
		FROM generate_series(1, 6) g`)
	require.NoError(t, err)
	out, err := run(t, nil, "cleanup", "--database-url", db.URL, "--batch-size", "2")
	require.NoError(t, err)
	require.NotContains(t, out, "scheduled", "0 keeps them, as it keeps delivered rows")
	out, err = run(t, nil, "cleanup", "--database-url", db.URL, "--delivered-retention", "168h", "--batch-size", "2")
	require.NoError(t, err)
	require.Contains(t, out, "deleted 3 scheduled events cancelled more than 168h0m0s ago\n")
	var cancelled, waiting int
	require.NoError(t, db.DB.QueryRow(`SELECT count(*) FILTER (WHERE cancelled_at IS NOT NULL),
		count(*) FILTER (WHERE cancelled_at IS NULL) FROM outbox_scheduled_events`).Scan(&cancelled, &waiting))
	require.Equal(t, 1, cancelled)
	require.Equal(t, 2, waiting)
}

// On MariaDB the cleanup deletes as on PostgreSQL, in batches: processed
// records, delivered rows and cancelled scheduled events older than their
// retention, settled dead letters, and nothing younger, pending, waiting
// or open.
func TestCleanupOnMariaDB(t *testing.T) {
	t.Parallel()
	db, url := mysqltest.Open(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.MySQL, db)))
	require.NoError(t, client.Schema.Create(context.Background()))
	const old, recent = `UTC_TIMESTAMP(6) - INTERVAL 10 DAY`, `UTC_TIMESTAMP(6) - INTERVAL 1 HOUR`
	for _, q := range []string{
		`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, delivered_at)
		VALUES (UUID(), 'old', 2, 'orders', 'Order', '1', '{}', ` + old + `), (UUID(), 'old', 2, 'orders', 'Order', '2', '{}', ` + old + `),
		(UUID(), 'old', 2, 'orders', 'Order', '3', '{}', ` + old + `), (UUID(), 'recent', 2, 'orders', 'Order', '4', '{}', ` + recent + `),
		(UUID(), 'pending', 2, 'orders', 'Order', '5', '{}', NULL)`,
		`INSERT INTO outbox_processed_events (consumer, event_id, event_name, processed_at) VALUES
		('billing', UUID(), 'old', ` + old + `), ('billing', UUID(), 'old', ` + old + `), ('billing', UUID(), 'recent', ` + recent + `)`,
		`INSERT INTO outbox_dead_letters (source, event_name, reason, retried_at, discarded_at) VALUES
		('billing', 'retried-old', 'x', ` + old + `, NULL), ('billing', 'discarded-recent', 'x', NULL, ` + recent + `),
		('billing', 'open', 'x', NULL, NULL)`,
		`INSERT INTO outbox_scheduled_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload,
		deliver_at, cancelled_at) VALUES (UUID(), 'cancelled-old', 2, 'orders', 'Order', '6', '{}', ` + old + `, ` + old + `),
		(UUID(), 'waiting', 2, 'orders', 'Order', '7', '{}', UTC_TIMESTAMP(6) + INTERVAL 1 DAY, NULL)`,
	} {
		_, err := db.Exec(q)
		require.NoError(t, err)
	}
	out, err := run(t, nil, "cleanup", "--database-url", url, "--processed-retention", "168h",
		"--delivered-retention", "168h", "--settled-dead-letter-retention", "168h", "--batch-size", "2")
	require.NoError(t, err)
	for _, line := range []string{"deleted 2 processed-event records older than 168h0m0s",
		"deleted 3 outbox rows delivered more than 168h0m0s ago",
		"deleted 1 scheduled events cancelled more than 168h0m0s ago",
		"deleted 1 dead letters retried or discarded more than 168h0m0s ago"} {
		require.Contains(t, out, line)
	}
	names := func(table string) (out []string) {
		rows, err := db.Query(`SELECT event_name FROM ` + table + ` ORDER BY event_name`)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var name string
			require.NoError(t, rows.Scan(&name))
			out = append(out, name)
		}
		return out
	}
	require.Equal(t, []string{"pending", "recent"}, names("outbox_events"))
	require.Equal(t, []string{"recent"}, names("outbox_processed_events"))
	require.Equal(t, []string{"discarded-recent", "open"}, names("outbox_dead_letters"))
	require.Equal(t, []string{"waiting"}, names("outbox_scheduled_events"))
}

// cleanup --databases-file cleans every tenant's database, its lines
// prefixed with the tenant; a tenant without the tables is named and
// fails the command, and the others are cleaned all the same.
func TestCleanupEveryTenantOfTheDatabasesFile(t *testing.T) {
	t.Parallel()
	migrated := func() *pgtest.DB {
		db := pgtest.New(t)
		pgtest.Migrate(t, testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB))).Schema.Create)
		_, err := db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id,
			payload, delivered_at) SELECT gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', g::text, '{}',
			now() - make_interval(days => g) FROM generate_series(1, 4) g`) // delivered 1 to 4 days ago
		require.NoError(t, err)
		return db
	}
	acme, globex, bare := migrated(), migrated(), pgtest.New(t)
	file := writeDatabasesFile(t,
		fleet.Tenant{Name: "acme", DatabaseURL: pgtest.ServerURL(), Schema: acme.Schema},
		fleet.Tenant{Name: "bare", DatabaseURL: pgtest.ServerURL(), Schema: bare.Schema},
		fleet.Tenant{Name: "globex", DatabaseURL: globex.URL})
	out, err := run(t, nil, "cleanup", "--databases-file", file, "--delivered-retention", "60h")
	require.Error(t, err)
	require.Contains(t, err.Error(), `tenant bare: table "outbox_processed_events" does not exist`)
	require.NotContains(t, err.Error(), "tenant acme")
	require.Contains(t, out, "acme: deleted 2 outbox rows delivered more than 60h0m0s ago\n")
	require.Contains(t, out, "bare: FAILED: ")
	require.Contains(t, out, "globex: deleted 2 outbox rows delivered more than 60h0m0s ago\n")
	for _, db := range []*pgtest.DB{acme, globex} {
		var left int
		require.NoError(t, db.DB.QueryRow(`SELECT count(*) FROM outbox_events`).Scan(&left))
		require.Equal(t, 2, left, "the rows delivered within the retention are kept")
	}
}
