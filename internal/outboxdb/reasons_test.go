package outboxdb_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/pgtest"
)

// A reason's pattern keeps its words and replaces what differs from one
// letter to the next.
func TestReasonPattern(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	for _, c := range []struct{ reason, want string }{
		{"publishing: the broker refused the message: no route", "publishing: the broker refused the message: no route"},
		{"decoding order 7731: invalid character 'x' looking for beginning of value",
			"decoding order <n>: invalid character '…' looking for beginning of value"},
		{"event 3F2A1B4C-1d2e-4f50-8a9b-0c1d2e3f4a5b not found", "event <uuid> not found"},
		{`pq: duplicate key value violates unique constraint "orders_pkey"`, `pq: duplicate key value violates unique constraint "…"`},
		{`say "a \"quoted\" 42" and ` + "`select 1`", `say "…" and ` + "`…`"},
		{"the payload isn't JSON, and can't be", "the payload isn't JSON, and can't be"},
		{"timeout after 30s waiting for ack from 127.0.0.1:5672", "timeout after <n>s waiting for ack from <n>.<n>:<n>"},
		{"amount 12.50 EUR over limit 10", "amount <n> EUR over limit <n>"},
		{"object deadbeef0042 at 0x1f3a", "object <id> at <id>"},
		{"card ch_3MtwBwLkdIwHu7ix28a3tqPa declined", "card ch_<id> declined"},
		{"order_7731 of aggregate Order/42", "order_<n> of aggregate Order/<n>"},
		{"v2 schema, utf8, sha256, http2 and deadbeef", "v2 schema, utf8, sha256, http2 and deadbeef"},
		{"build a1b2c3d (short hex) and 12345678", "build a1b2c3d (short hex) and <n>"},
		{"", ""},
	} {
		var got string
		require.NoError(t, db.DB.QueryRow(`SELECT `+outboxdb.ReasonPattern("$1::text"), c.reason).Scan(&got), c.reason)
		require.Equal(t, c.want, got, c.reason)
	}
	long := strings.Repeat("a", 5000)
	var got string
	require.NoError(t, db.DB.QueryRow(`SELECT `+outboxdb.ReasonPattern("$1::text"), long).Scan(&got))
	require.Len(t, got, 1000, "the pattern of a long reason is made of its start")
}

// Reasons that differ only in ids and numbers are one row; a source with
// few letters has its reasons listed beside a source with many.
func TestDeadLetterSummaryGroupsReasonsBySource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, tables := setup(t)
	// 225 consumer letters over 12 causes, each naming its order; 2 relay
	// letters, older, of one cause naming its topic.
	_, err := db.Exec(`INSERT INTO outbox_dead_letters (event_id, source, reason, attempts, created_at)
		SELECT gen_random_uuid(), 'relay', 'publishing to topic "Orders ' || g || '": invalid topic', 1, now() - interval '1 hour'
		FROM generate_series(1, 2) g;
		INSERT INTO outbox_dead_letters (event_id, source, reason, attempts)
		SELECT gen_random_uuid(), 'billing', 'cause ' || chr(97 + g % 12) || ': order ' || g || ' of ' || gen_random_uuid(), 1
		FROM generate_series(1, 225) g`)
	require.NoError(t, err)

	s, err := outboxdb.ReadDeadLetterSummary(ctx, db, tables, 0, 10)
	require.NoError(t, err)
	require.Equal(t, int64(227), s.Open)
	require.Equal(t, []outboxdb.SourceCount{{Source: "relay", Count: 2, Reasons: 1}, {Source: "billing", Count: 225, Reasons: 12}},
		s.BySource)
	require.Equal(t, outboxdb.ReasonCount{Source: "relay", Reason: `publishing to topic "…": invalid topic`,
		Example: `publishing to topic "Orders 2": invalid topic`, Count: 2}, s.ByReason[0], "the relay's, the newest as the example")
	require.Len(t, s.ByReason, 11, "the relay's and ten of billing's twelve")
	var billing int64
	for _, r := range s.ByReason[1:] {
		require.Equal(t, "billing", r.Source)
		require.Regexp(t, `^cause [a-l]: order <n> of <uuid>$`, r.Reason)
		require.Regexp(t, `^cause [a-l]: order \d+ of [0-9a-f-]{36}$`, r.Example)
		require.Contains(t, []int64{18, 19}, r.Count, "225 letters over 12 causes")
		billing += r.Count
	}
	require.Less(t, billing, int64(225), "two causes left out")
}
