package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/ent"
	"github.com/entoutbox/entoutbox/ent/deadletter"
)

// runWithInput runs the command with input on its standard input.
func runWithInput(t *testing.T, input string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := newRootCommand()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(strings.NewReader(input))
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// retry and discard: a dry run changes nothing and says what would be
// done; --all without a filter asks first (--yes does not), and acts on
// the letters it asked about; a letter asked for and skipped, or --all
// selecting none, exits 1; contradictory flags are refused, naming them.
func TestDeadLetterCommandGuards(t *testing.T) {
	t.Parallel()
	db, client := letterDB(t)
	ctx := context.Background()
	a := addLetter(t, client, "billing", "the billing code has a bug", time.Now().Add(-3*time.Hour))
	b := addLetter(t, client, "billing", "the billing code has a bug", time.Now().Add(-2*time.Hour))
	r := addLetter(t, client, "relay", "publishing: connection refused", time.Now().Add(-time.Hour))
	noID, err := client.DeadLetter.Create().SetSource("audit").SetReason("a message without an event id").Save(ctx)
	require.NoError(t, err)
	id := func(d *ent.DeadLetter) string { return strconv.FormatInt(d.ID, 10) }
	dl := func(input string, args ...string) (string, error) {
		return runWithInput(t, input, append(append([]string{"dead-letters"}, args...), "--database-url", db.URL)...)
	}
	open := func() int {
		return client.DeadLetter.Query().Where(deadletter.RetriedAtIsNil(), deadletter.DiscardedAtIsNil()).CountX(ctx)
	}

	// A dry run: what each letter's retry would do, nothing changed.
	out, err := dl("", "retry", "--all", "--consumer", "billing", "--dry-run")
	require.NoError(t, err)
	require.Contains(t, out, "dead letter "+id(a)+" (event "+a.EventID.String()+", billing): would be rebuilt\n")
	require.Contains(t, out, "dead letter "+id(b)+" (event "+b.EventID.String()+", billing): would be rebuilt\n")
	require.Contains(t, out, "dry run: 2 of 2 dead letters would be retried; nothing was changed\n")
	require.Equal(t, 4, open())
	require.Zero(t, client.Outbox.Query().CountX(ctx), "nothing written to the outbox")
	out, err = dl("", "retry", id(noID), "--dry-run")
	require.EqualError(t, err, "retry: 1 of 1 dead letters would be skipped (see above)")
	require.Contains(t, out, "would be skipped: the message had no event id")
	out, err = dl("", "discard", id(r), "--note", "resent by hand", "--dry-run")
	require.NoError(t, err)
	require.Contains(t, out, "dry run: 1 of 1 dead letters would be discarded; nothing was changed\n")
	require.Equal(t, 4, open())

	// Something asked for and not done: exit 1.
	out, err = dl("", "retry", id(noID))
	require.EqualError(t, err, "retry: 1 of 1 dead letters skipped (see above)")
	require.Contains(t, out, "retried 0 of 1 dead letters\n")
	_, err = dl("", "retry", "--all", "--event", "no.such.event")
	require.EqualError(t, err, "retry: no open dead letter matches the filters; nothing to retry")

	// Contradictory flags, named.
	_, err = dl("", "retry", "--all", "--since", "1h", "--until", "2h")
	require.ErrorContains(t, err, "--until ")
	require.ErrorContains(t, err, "is not after --since ")
	_, err = dl("", "list", "--source", "relay", "--consumer", "billing")
	require.EqualError(t, err, `--source "relay" and --consumer "billing" name two sources; give one`)
	_, err = dl("", "retry", "--all", "--limit", "-1", "--consumer", "billing")
	require.EqualError(t, err, "--limit -1: must not be negative (0: all)")
	require.Equal(t, 4, open())

	// --all without a filter asks; no answer (a cron job) or another
	// answer than yes is a refusal, also with a limit alone.
	for _, c := range []struct{ input, says string }{{"", "no answer on the input"}, {"n\n", `answered "n"`}} {
		out, err = dl(c.input, "retry", "--all")
		require.ErrorContains(t, err, "not confirmed ("+c.says+"): nothing done; give --yes", c.input)
		require.Contains(t, out, "retry every open dead letter, 4 of them (no filter given)? Type yes to go on: ")
		require.Equal(t, 4, open(), "refused: nothing retried")
	}
	_, err = dl("", "discard", "--all", "--limit", "1", "--note", "x")
	require.ErrorContains(t, err, "not confirmed")
	require.Equal(t, 4, open())
	out, err = dl("yes\n", "retry", "--all", "--limit", "2")
	require.NoError(t, err)
	require.Contains(t, out, "retried 2 of 2 dead letters\n", "the oldest two")
	require.Equal(t, 2, open())
	out, err = dl("", "discard", "--all", "--yes", "--note", "settled by hand")
	require.NoError(t, err)
	require.Contains(t, out, "discarded 2 of 2 dead letters\n")
	require.Zero(t, open())
}

// show cuts a payload past 64 KiB, saying so, unless --full; in JSON the
// start is payload_text with payload_truncated and payload_bytes.
func TestDeadLetterShowCutsLongPayloads(t *testing.T) {
	t.Parallel()
	db, client := letterDB(t)
	ctx := context.Background()
	// 200 KiB of two-byte runes, as a JSON string: the cut falls inside
	// a rune unless it looks.
	payload := `{"note":"` + strings.Repeat("é", 100<<10) + `"}`
	d, err := client.DeadLetter.Create().SetSource("billing").SetEventName("order.paid").SetEventVersion(1).
		SetTopic("orders").SetAggregateType("Order").SetAggregateID("1").SetPayload([]byte(payload)).
		SetReason("too big to handle").Save(ctx)
	require.NoError(t, err)
	show := func(args ...string) string {
		t.Helper()
		out, err := run(t, nil, append([]string{"dead-letters", "show", strconv.FormatInt(d.ID, 10), "--database-url", db.URL}, args...)...)
		require.NoError(t, err)
		return out
	}

	out := show()
	require.Less(t, len(out), 65<<10+1000, "about 64 KiB of payload, not 200")
	require.Contains(t, out, `payload:        {"note":"éé`)
	require.Contains(t, out, "\n… payload cut at 64.0 KiB of 200.0 KiB; --full prints it whole\n")
	require.True(t, utf8.ValidString(out), "cut between runes")
	require.Contains(t, show("--full"), payload)
	require.NotContains(t, show("--full"), "payload cut")

	var shown map[string]any
	require.NoError(t, json.Unmarshal([]byte(show("--json")), &shown))
	require.Equal(t, true, shown["payload_truncated"])
	require.Equal(t, float64(len(payload)), shown["payload_bytes"])
	text, _ := shown["payload_text"].(string)
	require.True(t, strings.HasPrefix(payload, text))
	require.InDelta(t, 64<<10, len(text), 2)
	require.Nil(t, shown["payload"])
	shown = nil
	require.NoError(t, json.Unmarshal([]byte(show("--json", "--full")), &shown))
	require.Equal(t, map[string]any{"note": strings.Repeat("é", 100<<10)}, shown["payload"])
	require.Nil(t, shown["payload_truncated"])

	out, err = run(t, nil, "dead-letters", "list", "--json", "--database-url", db.URL)
	require.NoError(t, err)
	var listed []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Len(t, listed, 1)
	require.Equal(t, true, listed[0]["payload_truncated"], "list --json cuts too")
}

// replay: --until not after --since and --to-topic with --topic-prefix
// are refused, naming them; --dry-run says what would go where and needs
// no broker; --limit replays the first N; nothing to replay exits 1.
func TestReplayGuards(t *testing.T) {
	t.Parallel()
	db, _ := letterDB(t)
	_, err := db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id,
			payload, delivered_at)
		SELECT ('00000000-0000-4000-8000-' || lpad(g::text, 12, '0'))::uuid, 'order.paid', 2,
			CASE WHEN g <= 3 THEN 'orders' ELSE 'payments' END, 'Order', g::text, '{}', now()
		FROM generate_series(1, 5) g ORDER BY g`)
	require.NoError(t, err)
	replay := func(args ...string) (string, error) {
		return run(t, nil, append([]string{"replay", "--database-url", db.URL, "--event", "order.paid"}, args...)...)
	}

	_, err = replay("--since", "1h", "--until", "2h", "--broker", "mem://")
	require.ErrorContains(t, err, "--until ")
	require.ErrorContains(t, err, " is not after --since ")
	_, err = replay("--since", "1h", "--to-topic", "rebuild", "--topic-prefix", "staging.", "--broker", "mem://")
	require.EqualError(t, err, `--to-topic "rebuild" and --topic-prefix "staging.": --to-topic sends every event to that one topic, unprefixed; give one`)
	_, err = replay("--since", "1h")
	require.EqualError(t, err, "no broker: set --broker or ENTOUTBOX_BROKER (or --dry-run)")

	out, err := replay("--since", "1h", "--dry-run")
	require.NoError(t, err)
	require.Equal(t, `dry run: would replay 5 events; nothing was published
  3 to orders
    first: event 00000000-0000-4000-8000-000000000001 (order.paid v2, Order 1), written `, out[:strings.Index(out, "written ")+8])
	require.Regexp(t, `\n    last:  event 00000000-0000-4000-8000-000000000003 \(order.paid v2, Order 3\), written \S+\n  2 to payments\n`, out)
	out, err = replay("--since", "1h", "--dry-run", "--limit", "2", "--topic-prefix", "staging.")
	require.NoError(t, err)
	require.Contains(t, out, "dry run: would replay 2 events (stopped at --limit 2); nothing was published\n  2 to staging.orders\n")
	require.NotContains(t, out, "payments")

	out, err = replay("--since", "1h", "--limit", "4", "--broker", "mem://")
	require.NoError(t, err)
	require.Equal(t, "replayed 4 events (stopped at --limit 4)\n", out)
	_, err = replay("--since", "1h", "--aggregate", "no-such-aggregate", "--broker", "mem://")
	require.ErrorContains(t, err, "replay: no retained delivered event matches")
	_, err = replay("--since", "1h", "--aggregate", "no-such-aggregate", "--dry-run")
	require.ErrorContains(t, err, "replay: no retained delivered event matches")
}

// Times the status does not have are null in JSON, not year 1.
func TestStatusJSONHasNullForAbsentTimes(t *testing.T) {
	t.Parallel()
	db, _ := letterDB(t)
	read := func() map[string]json.RawMessage {
		t.Helper()
		out, err := run(t, nil, "status", "--database-url", db.URL, "--json")
		require.NoError(t, err)
		var st map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(out), &st), out)
		require.NotContains(t, out, "0001-01-01")
		return st
	}
	st := read()
	require.Equal(t, "null", string(st["oldest_pending"]), "nothing pending")
	require.Equal(t, "0", string(st["oldest_pending_age_seconds"]))
	require.Equal(t, "[]", string(st["problems"]))

	// A consumer behind on events none of which is in the outbox: its
	// oldest is unknown. The pending row is on a topic the consumer has no
	// position on (the database numbers it, so on its topic it would count).
	_, err := db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload)
			VALUES (gen_random_uuid(), 'shipment.booked', 1, 'shipments', 'Shipment', '1', '{}');
		INSERT INTO outbox_aggregate_sequences (topic, aggregate_type, aggregate_id, last_seq) VALUES ('orders', 'Order', '7', 3);
		INSERT INTO outbox_consumer_positions (consumer, topic, aggregate_type, aggregate_id, last_seq, updated_at)
			VALUES ('billing', 'orders', 'Order', '7', 1, now())`)
	require.NoError(t, err)
	st = read()
	var oldest time.Time
	require.NoError(t, json.Unmarshal(st["oldest_pending"], &oldest))
	require.WithinDuration(t, time.Now(), oldest, time.Hour)
	var lags []map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(st["lag"], &lags))
	require.Len(t, lags, 1)
	require.Equal(t, `"billing"`, string(lags[0]["consumer"]))
	require.Equal(t, "null", string(lags[0]["oldest"]))
}
