package outboxdb_test

import (
	"context"
	"database/sql"
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/outbox"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/ from the code")

// TestPromoteQueryDefined holds the promotion statement, with and without
// a sequence table, to the named statements TestStatementsGolden holds to
// their files.
func TestPromoteQueryDefined(t *testing.T) {
	require.Equal(t, outbox.NotifyChannel("t"), outboxdb.NotifyChannel("t"))
	numbered := outboxdb.New("", "")
	unnumbered := numbered
	unnumbered.Sequences = ""
	require.Equal(t, defined(t, "promote/promote").SQL(numbered), numbered.PromoteQuery())
	require.Equal(t, defined(t, "promote/promote-unnumbered").SQL(numbered), unnumbered.PromoteQuery())
}

// scheduleOne writes a pending scheduled event of aggregate id due in (by
// the database's clock) and returns its row id.
func scheduleOne(t *testing.T, db *sql.DB, aggregate string, in time.Duration, headers string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, db.QueryRow(`INSERT INTO outbox_scheduled_events (event_id, event_name, event_version, topic,
		aggregate_type, aggregate_id, payload, headers, deliver_at) VALUES (gen_random_uuid(), 'order.paid', 1, 'orders',
		'Order', $1, '{}', NULLIF($3, '')::jsonb, clock_timestamp() + $2 * interval '1 microsecond') RETURNING id`,
		aggregate, in.Microseconds(), headers).Scan(&id))
	return id
}

func TestPromote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, tables := setup(t)
	// Aggregate A has a number already: its events follow it.
	_, err := db.Exec(`INSERT INTO outbox_aggregate_sequences (topic, aggregate_type, aggregate_id, last_seq)
		VALUES ('orders', 'Order', 'A', 7)`)
	require.NoError(t, err)
	a1 := scheduleOne(t, db, "A", -2*time.Second, `{"k":"v"}`)
	b1 := scheduleOne(t, db, "B", -time.Second, ``)
	a2 := scheduleOne(t, db, "A", -3*time.Second, `null`) // due before a1: numbered before it
	cancelled := scheduleOne(t, db, "A", -time.Second, `{}`)
	_, err = db.Exec(`UPDATE outbox_scheduled_events SET cancelled_at = clock_timestamp() WHERE id = $1`, cancelled)
	require.NoError(t, err)
	later := scheduleOne(t, db, "A", time.Hour, `{}`)

	moved, locked, err := tables.Promote(ctx, db, 2)
	require.NoError(t, err)
	require.True(t, locked)
	require.Equal(t, 2, moved, "bounded by the limit")
	moved, _, err = tables.Promote(ctx, db, 10)
	require.NoError(t, err)
	require.Equal(t, 1, moved)

	rows, err := db.Query(`SELECT aggregate_id, aggregate_seq, headers, headers->>$1 FROM outbox_events ORDER BY id`,
		events.MetaDeliverAt)
	require.NoError(t, err)
	defer rows.Close()
	type got struct {
		agg  string
		seq  int64
		hdr  string
		when string
	}
	var all []got
	for rows.Next() {
		var g got
		require.NoError(t, rows.Scan(&g.agg, &g.seq, &g.hdr, &g.when))
		h, err := outbox.DecodeHeaders([]byte(g.hdr))
		require.NoError(t, err, "the relay reads the headers it wrote")
		require.Equal(t, g.when, h[events.MetaDeliverAt])
		_, err = time.Parse(time.RFC3339Nano, g.when)
		require.NoError(t, err)
		require.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`, g.when)
		all = append(all, g)
	}
	require.NoError(t, rows.Err())
	require.Len(t, all, 3)
	require.Equal(t, []string{"A", "A", "B"}, []string{all[0].agg, all[1].agg, all[2].agg}, "inserted by deliver_at, id")
	require.Equal(t, []int64{8, 9, 1}, []int64{all[0].seq, all[1].seq, all[2].seq}, "numbered after the counter")
	require.Contains(t, all[1].hdr, `"k": "v"`, "the event's headers stay")

	var left []int64
	rows2, err := db.Query(`SELECT id FROM outbox_scheduled_events ORDER BY id`)
	require.NoError(t, err)
	defer rows2.Close()
	for rows2.Next() {
		var id int64
		require.NoError(t, rows2.Scan(&id))
		left = append(left, id)
	}
	require.Equal(t, []int64{cancelled, later}, left, "promoted rows leave the table, %d %d %d", a1, a2, b1)

	next, ok, err := tables.NextDue(ctx, db)
	require.NoError(t, err)
	require.True(t, ok)
	require.InDelta(t, time.Hour.Seconds(), next.Seconds(), 60)

	// Another promotion holds the lock: this one moves nothing.
	scheduleOne(t, db, "C", -time.Second, `{}`)
	tx, err := db.Begin()
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.Exec(`SELECT pg_advisory_xact_lock(` + outboxdb.PromoteLockKey(tables.Scheduled) + `)`)
	require.NoError(t, err)
	moved, locked, err = tables.Promote(ctx, db, 10)
	require.NoError(t, err)
	require.False(t, locked)
	require.Zero(t, moved)
	require.NoError(t, tx.Rollback())
	moved, locked, err = tables.Promote(ctx, db, 10)
	require.NoError(t, err)
	require.True(t, locked)
	require.Equal(t, 1, moved)
	next, ok, err = tables.NextDue(ctx, db)
	require.NoError(t, err)
	require.True(t, ok)
	require.Greater(t, next, 59*time.Minute)

	// Without a sequence table, no numbers.
	unnumbered := tables
	unnumbered.Sequences = ""
	scheduleOne(t, db, "D", -time.Second, `{}`)
	moved, _, err = unnumbered.Promote(ctx, db, 10)
	require.NoError(t, err)
	require.Equal(t, 1, moved)
	var seq sql.NullInt64
	require.NoError(t, db.QueryRow(`SELECT aggregate_seq FROM outbox_events WHERE aggregate_id = 'D'`).Scan(&seq))
	require.False(t, seq.Valid)
}

// A transaction holding an aggregate's counter (an Emit of it not yet
// committed) holds back the promotion of none of the other aggregates'
// events: the promotion skips the aggregate rather than wait for it, and
// takes its events once the counter is free. (Waiting would also deadlock
// with that transaction cancelling one of the events it had locked.)
func TestPromoteSkipsAggregatesWhoseCounterIsHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, tables := setup(t)
	_, err := db.Exec(`INSERT INTO outbox_aggregate_sequences (topic, aggregate_type, aggregate_id, last_seq)
		VALUES ('orders', 'Order', 'A', 0), ('orders', 'Order', 'B', 0)`)
	require.NoError(t, err)
	scheduleOne(t, db, "A", -2*time.Second, `{}`)
	scheduleOne(t, db, "B", -time.Second, `{}`)
	held, err := db.Begin()
	require.NoError(t, err)
	defer func() { _ = held.Rollback() }()
	_, err = held.Exec(`UPDATE outbox_aggregate_sequences SET last_seq = last_seq WHERE aggregate_id = 'A'`)
	require.NoError(t, err)

	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	moved, locked, err := tables.Promote(tctx, db, 10)
	require.NoError(t, err, "the promotion waited for the held counter")
	require.True(t, locked)
	require.Equal(t, 1, moved, "B's event, not A's")
	var agg string
	require.NoError(t, db.QueryRow(`SELECT aggregate_id FROM outbox_events`).Scan(&agg))
	require.Equal(t, "B", agg)

	require.NoError(t, held.Commit())
	moved, _, err = tables.Promote(ctx, db, 10)
	require.NoError(t, err)
	require.Equal(t, 1, moved, "A's event once its counter is free")
	var seq int64
	require.NoError(t, db.QueryRow(`SELECT aggregate_seq FROM outbox_events WHERE aggregate_id = 'A'`).Scan(&seq))
	require.EqualValues(t, 1, seq)
}

// Advisory locks belong to the whole database: the promotion of a table
// of the same name in another schema (another application, another test)
// must not hold back this one's.
func TestPromoteLockIsTheTablesOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, tables := setup(t)
	other, _ := setup(t) // another schema, the same table names
	scheduleOne(t, db, "A", -time.Second, `{}`)

	tx, err := other.Begin()
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.Exec(`SELECT pg_advisory_xact_lock(` + outboxdb.PromoteLockKey(tables.Scheduled) + `)`)
	require.NoError(t, err)
	moved, locked, err := tables.Promote(ctx, db, 10)
	require.NoError(t, err)
	require.True(t, locked, "the other schema's promotion holds its own lock")
	require.Equal(t, 1, moved)
}
