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
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/ent"
	outboxrow "github.com/entoutbox/entoutbox/ent/outbox"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
)

// letterDB is a schema with the outbox tables and an ent client on it.
func letterDB(t *testing.T) (*pgtest.DB, *ent.Client) {
	t.Helper()
	db := pgtest.New(t)
	app := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	pgtest.Migrate(t, app.Schema.Create)
	return db, ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
}

func addLetter(t *testing.T, client *ent.Client, source, reason string, at time.Time) *ent.DeadLetter {
	t.Helper()
	d, err := client.DeadLetter.Create().SetEventID(uuid.New()).SetSource(source).SetEventName("order.paid").
		SetEventVersion(2).SetTopic("orders").SetAggregateType("Order").SetAggregateID("9").
		SetPayload([]byte(`{"order_id":9,"amount_cents":5,"currency":"EUR"}`)).
		SetHeaders(json.RawMessage(`{"trace":"abc"}`)).SetReason(reason).
		SetAttempts(5).SetCreatedAt(at).Save(context.Background())
	require.NoError(t, err)
	return d
}

func TestDeadLettersCommands(t *testing.T) {
	t.Parallel()
	db, client := letterDB(t)
	ctx := context.Background()
	billing := addLetter(t, client, "billing", "the billing code has a bug", time.Now().Add(-2*time.Hour))
	relayed := addLetter(t, client, "relay", "publishing: connection refused", time.Now())
	id := func(d *ent.DeadLetter) string { return strconv.FormatInt(d.ID, 10) }
	dl := func(args ...string) (string, error) {
		return run(t, nil, append(append([]string{"dead-letters"}, args...), "--database-url", db.URL)...)
	}

	out, err := dl("list")
	require.NoError(t, err)
	require.Regexp(t, `ID +WHEN +SOURCE +EVENT +EVENT ID +ATTEMPTS +STATE +REASON\n`, out)
	require.Regexp(t, id(relayed)+` .* relay +order.paid v2 +`+relayed.EventID.String()+` +5 +open +publishing: connection refused\n`, out)
	out, err = dl("list", "--consumer", "billing", "--json")
	require.NoError(t, err)
	var listed []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Len(t, listed, 1)
	require.Equal(t, billing.EventID.String(), listed[0]["event_id"])
	require.Equal(t, "open", listed[0]["state"])
	out, err = dl("list", "--since", "1h", "--reason", "refused")
	require.NoError(t, err)
	require.Contains(t, out, relayed.EventID.String())
	require.NotContains(t, out, billing.EventID.String())
	out, err = dl("list", "--until", "1h", "--event", "order.paid")
	require.NoError(t, err)
	require.NotContains(t, out, relayed.EventID.String())
	require.Contains(t, out, billing.EventID.String())

	out, err = dl("show", id(billing))
	require.NoError(t, err)
	for _, want := range []string{"event id:       " + billing.EventID.String(), "source:         billing",
		"attempts:       5", "reason:         the billing code has a bug", `headers:        {"trace": "abc"}`,
		`payload:        {"order_id":9,"amount_cents":5,"currency":"EUR"}`, "dead-lettered:  "} {
		require.Contains(t, out, want)
	}
	_, err = dl("show", "999999")
	require.ErrorContains(t, err, "no such dead letter: 999999")

	// retry: the event is pending again in the outbox, with its own id.
	_, err = dl("retry")
	require.ErrorContains(t, err, "give dead-letter ids, or --all")
	_, err = dl("retry", id(billing), "--consumer", "billing")
	require.ErrorContains(t, err, "filters select letters only with --all")
	out, err = dl("retry", id(billing))
	require.NoError(t, err)
	require.Contains(t, out, "dead letter "+id(billing)+" (event "+billing.EventID.String()+", billing): rebuilt\nretried 1 of 1 dead letters\n")
	row := client.Outbox.Query().Where(outboxrow.EventID(billing.EventID)).OnlyX(ctx)
	require.Nil(t, row.DeliveredAt)
	require.Equal(t, map[string]string{"trace": "abc"}, row.Headers)
	require.JSONEq(t, `{"order_id":9,"amount_cents":5,"currency":"EUR"}`, string(row.Payload))
	_, err = dl("retry", "--all", "--consumer", "billing")
	require.EqualError(t, err, "retry: no open dead letter matches the filters; nothing to retry")
	out, err = dl("retry", id(billing))
	require.EqualError(t, err, "retry: 1 of 1 dead letters skipped (see above)", "nothing done: exit 1")
	require.Contains(t, out, "skipped: already retried at ")
	require.Equal(t, 1, client.Outbox.Query().CountX(ctx))

	// discard: kept, marked, with the note.
	_, err = dl("discard", id(relayed))
	require.ErrorContains(t, err, "discard needs --note")
	out, err = dl("discard", id(relayed), "--note", "the broker was misconfigured; resent by hand")
	require.NoError(t, err)
	require.Contains(t, out, "discarded 1 of 1 dead letters\n")
	out, err = dl("show", id(relayed), "--json")
	require.NoError(t, err)
	var shown map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &shown))
	require.Equal(t, "discarded", shown["state"])
	require.Equal(t, "the broker was misconfigured; resent by hand", shown["discard_note"])
	require.NotEmpty(t, shown["discarded_at"])
	out, err = dl("list", "--state", "discarded")
	require.NoError(t, err)
	require.Contains(t, out, relayed.EventID.String())
	require.NotContains(t, out, billing.EventID.String())

	// purge: settled letters older than the retention only. A negative
	// one would reach into the future and delete them all: refused.
	_, err = dl("purge", "--older-than", "-1h")
	require.EqualError(t, err, "--older-than -1h0m0s: must not be negative")
	require.Equal(t, 2, client.DeadLetter.Query().CountX(ctx), "a refused purge deletes nothing")
	out, err = dl("purge")
	require.NoError(t, err)
	require.Equal(t, "deleted 0 dead letters retried or discarded more than 720h0m0s ago\n", out)
	out, err = dl("purge", "--older-than", "0s")
	require.NoError(t, err)
	require.Equal(t, "deleted 2 dead letters retried or discarded more than 0s ago\n", out)
}

// shopTables makes the outbox table shop_outbox and the dead-letter table
// shop_letters beside the default ones, which hold decoys: dead letters
// with the same ids as shop_letters' and the reason "a decoy".
func shopTables(t *testing.T, db *pgtest.DB) {
	t.Helper()
	_, err := db.DB.Exec(`CREATE TABLE shop_outbox (LIKE outbox_events INCLUDING ALL);
		CREATE TABLE shop_letters (LIKE outbox_dead_letters INCLUDING ALL);
		INSERT INTO outbox_dead_letters (event_id, source, event_name, event_version, topic, aggregate_type,
			aggregate_id, payload, reason, attempts)
		SELECT gen_random_uuid(), 'billing', 'order.paid', 2, 'orders', 'Order', '9', '{}', 'a decoy', 1
		FROM generate_series(1, 2)`)
	require.NoError(t, err)
}

// dead-letters list, show, retry, discard and purge work on the tables
// --table and --dead-letter-table name, and leave the default ones alone.
func TestDeadLettersCommandsOnOtherTables(t *testing.T) {
	t.Parallel()
	db, _ := letterDB(t)
	shopTables(t, db)
	// A consumer's letter of an event the relay delivered (its row retained
	// in shop_outbox), and a relay's letter.
	var (
		billing, relayed           int64
		billingEvent, relayedEvent string
	)
	require.NoError(t, db.DB.QueryRow(`WITH row AS (
			INSERT INTO shop_outbox (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, delivered_at)
			VALUES (gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', '9', '{"order_id":9}', now()) RETURNING event_id)
		INSERT INTO shop_letters (event_id, source, event_name, event_version, topic, aggregate_type, aggregate_id,
			payload, headers, reason, attempts)
		SELECT event_id, 'billing', 'order.paid', 2, 'orders', 'Order', '9', '{"order_id":9}', '{}', 'the shop bug', 5 FROM row
		RETURNING id, event_id`).Scan(&billing, &billingEvent))
	require.NoError(t, db.DB.QueryRow(`INSERT INTO shop_letters (event_id, source, event_name, event_version, topic,
			aggregate_type, aggregate_id, payload, reason, attempts)
		VALUES (gen_random_uuid(), 'relay', 'order.paid', 2, 'orders', 'Order', '8', '{}', 'the shop broker refused it', 5)
		RETURNING id, event_id`).Scan(&relayed, &relayedEvent))
	id := func(n int64) string { return strconv.FormatInt(n, 10) }
	dl := func(args ...string) (string, error) {
		return run(t, nil, append(append([]string{"dead-letters"}, args...), "--database-url", db.URL,
			"--table", "shop_outbox", "--dead-letter-table", "shop_letters")...)
	}

	out, err := dl("list")
	require.NoError(t, err)
	require.Contains(t, out, "the shop bug")
	require.Contains(t, out, "the shop broker refused it")
	require.NotContains(t, out, "a decoy")
	out, err = dl("list", "--json")
	require.NoError(t, err)
	var listed []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Len(t, listed, 2)
	require.Equal(t, relayedEvent, listed[0]["event_id"], "newest first")
	require.Equal(t, map[string]any{"order_id": float64(9)}, listed[1]["payload"], "the payload as JSON")

	out, err = dl("show", id(billing))
	require.NoError(t, err)
	require.Contains(t, out, "reason:         the shop bug")
	require.Contains(t, out, "event id:       "+billingEvent)

	// The delivered row is written again, pending, in shop_outbox.
	out, err = dl("retry", id(billing))
	require.NoError(t, err)
	require.Contains(t, out, "dead letter "+id(billing)+" (event "+billingEvent+", billing): requeued\n")
	var pending, inDefault int
	require.NoError(t, db.DB.QueryRow(`SELECT (SELECT count(*) FROM shop_outbox WHERE event_id = $1 AND delivered_at IS NULL),
		(SELECT count(*) FROM outbox_events)`, billingEvent).Scan(&pending, &inDefault))
	require.Equal(t, 1, pending)
	require.Zero(t, inDefault)

	out, err = dl("discard", id(relayed), "--note", "resent by hand")
	require.NoError(t, err)
	require.Contains(t, out, "discarded 1 of 1 dead letters\n")
	out, err = dl("list", "--state", "open")
	require.NoError(t, err)
	require.Equal(t, "no dead letters\n", out)
	out, err = dl("purge", "--older-than", "0s")
	require.NoError(t, err)
	require.Equal(t, "deleted 2 dead letters retried or discarded more than 0s ago\n", out)

	// The default tables' letters, with the same ids, are as they were.
	var decoys int
	require.NoError(t, db.DB.QueryRow(`SELECT count(*) FROM outbox_dead_letters WHERE retried_at IS NULL
		AND discarded_at IS NULL AND event_id IS NOT NULL`).Scan(&decoys))
	require.Equal(t, 2, decoys)
}
