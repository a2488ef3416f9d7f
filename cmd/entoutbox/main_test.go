package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay"
)

func run(t *testing.T, env map[string]string, args ...string) (string, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	var out bytes.Buffer
	cmd := newRootCommand()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func TestStatusAndCleanup(t *testing.T) {
	db := pgtest.New(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	pgtest.Migrate(t, client.Schema.Create)
	_, err := db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, created_at)
		SELECT gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', g::text, '{}', now() - interval '90 seconds' FROM generate_series(1, 4) g;
		INSERT INTO outbox_processed_events (consumer, event_id, event_name, processed_at)
		SELECT 'billing', gen_random_uuid(), 'order.paid', now() - interval '30 days' FROM generate_series(1, 5)`)
	require.NoError(t, err)

	// The database URL comes from the environment.
	out, err := run(t, map[string]string{"ENTOUTBOX_DATABASE_URL": db.URL}, "status")
	require.NoError(t, err)
	require.Contains(t, out, "pending events:      4\n")
	require.Regexp(t, `oldest pending age:  1m3\d\.\d+s`, out)
	require.Contains(t, out, "dead letters:        0\n")
	require.NotContains(t, out, "fast relays", "no fast relay has run")

	// A fast relay subscription shows with the partitions it owns.
	sub, err := relay.NewSubscriber(db.DB, relay.SubscriberConfig{RelayID: "r1", Partitions: 4})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err = sub.Subscribe(ctx, relay.AllTopics)
	require.NoError(t, err)
	out, err = run(t, nil, "status", "--database-url", db.URL)
	require.NoError(t, err)
	require.Contains(t, out, "fast relays:         1, sharing 4 partitions\n")
	require.Regexp(t, `  r1/[0-9a-f]{8}/1 owns 4 \(every topic\), lease until \S+\n`, out)
	require.NoError(t, sub.Close())

	// A holder whose lease lapsed, and one that is not running (no
	// liveness lock), each say so.
	_, err = db.DB.Exec(`UPDATE outbox_events_partitions SET relay = 'ghost/1/1', until = now() - interval '5 seconds' WHERE partition < 2;
		UPDATE outbox_events_partitions SET relay = 'ghost/2/1', until = now() + interval '30 seconds' WHERE partition = 2;
		UPDATE outbox_events_partitions SET relay = 'ghost/3/1', until = now() + interval '30 seconds' WHERE partition = 3;
		INSERT INTO outbox_events_relays (topic, relay, until, live_lock) VALUES ('', 'ghost/2/1', now() + interval '30 seconds', true),
			('', 'ghost/3/1', now() + interval '30 seconds', false)`)
	require.NoError(t, err)
	out, err = run(t, nil, "status", "--database-url", db.URL)
	require.NoError(t, err)
	require.Regexp(t, `  ghost/1/1 owns 2 \(every topic\), lease lapsed [56]s ago: stopped renewing; the next relay to rebalance takes them\n`, out)
	require.Regexp(t, `  ghost/2/1 owns 1 \(every topic\), lease until \S+; not running \(its liveness lock is gone\): taken over within seconds\n`, out)
	require.Regexp(t, `  ghost/3/1 owns 1 \(every topic\), lease until \S+; holds no liveness lock \(poll-only, or an earlier version\): taken over when its lease ends\n`, out)

	out, err = run(t, nil, "cleanup", "--database-url", db.URL, "--batch-size", "2")
	require.NoError(t, err)
	require.Contains(t, out, "deleted 5 processed-event records older than 168h0m0s")
}

func TestClearErrors(t *testing.T) {
	t.Setenv("ENTOUTBOX_DATABASE_URL", "")
	t.Setenv("DATABASE_URL", "")
	_, err := run(t, nil, "status")
	require.EqualError(t, err, "no database: set --database-url, ENTOUTBOX_DATABASE_URL or DATABASE_URL to the URL of the database holding the outbox (postgres://…, mysql://… or sqlite:PATH)")
	_, err = run(t, nil, "relay", "--database-url", "postgres://x")
	require.EqualError(t, err, "no broker: set --broker or ENTOUTBOX_BROKER")
	_, err = run(t, nil, "relay", "--database-url", pgtest.ServerURL(), "--broker", "foo://x")
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), `unknown scheme "foo"`), err.Error())
	out, err := run(t, nil, "relay", "--help")
	require.NoError(t, err)
	require.Contains(t, out, "nats://127.0.0.1:4222")
}

// The commands that read the outbox say what to run on a database without
// its tables, as the relay does, rather than a bare "relation does not
// exist".
func TestCommandsOnADatabaseWithoutTheTables(t *testing.T) {
	db := pgtest.New(t)
	const hint = `table "outbox_events" does not exist (run the ent migration first: client.Schema.Create)`
	for _, args := range [][]string{
		{"status"},
		{"status", "--json"},
		{"dead-letters", "list"},
		{"dead-letters", "show", "1"},
		{"dead-letters", "retry", "1"},
		{"dead-letters", "discard", "1", "--note", "x"},
		{"dead-letters", "purge", "--older-than", "1h"},
		{"replay", "--event", "order.paid", "--since", "1h", "--dry-run"},
		{"console", "--addr", "127.0.0.1:0"},
	} {
		_, err := run(t, nil, append(args, "--database-url", db.URL)...)
		require.EqualError(t, err, hint, strings.Join(args, " "))
	}

	// cleanup names the first table it would delete from.
	for args, table := range map[string]string{
		"":                               "outbox_processed_events",
		"--processed-table my_processed": "my_processed",
	} {
		_, err := run(t, nil, append([]string{"cleanup", "--database-url", db.URL}, strings.Fields(args)...)...)
		require.EqualError(t, err, `table "`+table+`" does not exist (run the ent migration first: client.Schema.Create)`, args)
	}
	_, err := db.DB.Exec(`CREATE TABLE outbox_processed_events (id bigint)`)
	require.NoError(t, err)
	_, err = run(t, nil, "cleanup", "--database-url", db.URL, "--delivered-retention", "1h")
	require.EqualError(t, err, `table "outbox_events" does not exist (run the ent migration first: client.Schema.Create)`)

	// A dead-letter table missing is named too.
	_, err = db.DB.Exec(`CREATE TABLE outbox_events (id bigint)`)
	require.NoError(t, err)
	_, err = run(t, nil, "status", "--database-url", db.URL)
	require.EqualError(t, err, `table "outbox_events" is not an outbox table: it lacks the columns event_id, event_name, `+
		`event_version, topic, aggregate_type, aggregate_id, payload, headers, created_at, transaction_id, available_at, `+
		`attempts, delivered_at, last_error, readable_from, aggregate_seq (run the ent migration first: client.Schema.Create)`)
}

// On SQLite the command runs the relay; the others say so rather than
// fail on PostgreSQL's SQL.
func TestCommandsOtherThanTheRelayRefuseSQLiteClearly(t *testing.T) {
	t.Parallel()
	url := "sqlite:" + filepath.Join(t.TempDir(), "app.db")
	for _, args := range [][]string{{"status"}, {"dead-letters", "list"}, {"cleanup"}} {
		_, err := run(t, nil, append(args, "--database-url", url)...)
		require.EqualError(t, err, "on SQLite the command runs the relay only for now (entoutbox relay --database-url sqlite:PATH); "+
			"status, dead letters, cleanup, replay and the console need PostgreSQL or MySQL/MariaDB", "%v", args)
	}
}
