package outboxdb_test

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/ent"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/pgtest"
)

// setup is a test's own schema with the outbox tables, at their default
// names.
func setup(t *testing.T) (*sql.DB, outboxdb.Tables) {
	t.Helper()
	db := pgtest.New(t)
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	pgtest.Migrate(t, client.Schema.Create)
	return db.DB, outboxdb.New("", "")
}

// insert writes n committed rows of topic, in one transaction, and returns
// their ids.
func insert(t *testing.T, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, topic string, n int) []int64 {
	t.Helper()
	rows, err := q.QueryContext(context.Background(), `INSERT INTO outbox_events
		(event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload)
		SELECT gen_random_uuid(), 'order.paid', 1, $1, 'Order', g::text, '{}' FROM generate_series(1, $2) g RETURNING id`,
		topic, n)
	require.NoError(t, err)
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	slices.Sort(ids)
	return ids
}

// ids runs query (ids of the outbox rows) and returns them in order.
func ids(t *testing.T, db *sql.DB, query string) []int64 {
	t.Helper()
	rows, err := db.Query(query)
	require.NoError(t, err)
	defer rows.Close()
	out := []int64{}
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		out = append(out, id)
	}
	require.NoError(t, rows.Err())
	return out
}

func snapshot(t *testing.T, db *sql.DB) string {
	t.Helper()
	var s string
	require.NoError(t, db.QueryRow(`SELECT pg_current_snapshot()::text`).Scan(&s))
	return s
}

// The progress table as the WAL relay creates it.
const progressDDL = `CREATE TABLE outbox_events_wal_progress (slot text PRIMARY KEY, created pg_snapshot,
	delivered pg_snapshot, confirmed_lsn pg_lsn, updated_at timestamptz NOT NULL DEFAULT now())`

func TestTablesAreNamedAfterTheOutboxTable(t *testing.T) {
	t.Parallel()
	require.Equal(t, outboxdb.Tables{Outbox: "outbox_events", DeadLetters: "outbox_dead_letters", Scheduled: "outbox_scheduled_events",
		Processed: "outbox_processed_events", Positions: "outbox_consumer_positions", Sequences: "outbox_aggregate_sequences"},
		outboxdb.New("", ""))
	tables := outboxdb.New("billing_outbox", "billing_letters")
	require.Equal(t, "billing_letters", tables.DeadLetters)
	require.Equal(t, []string{"billing_outbox_partitions", "billing_outbox_relays", "billing_outbox_wal_progress",
		"billing_outbox_relay_offsets"}, []string{tables.Partitions(), tables.Relays(), tables.WALProgress(), tables.RelayOffsets()})

	require.NoError(t, outboxdb.CheckName(strings.Repeat("x", outboxdb.MaxOutboxName)))
	long := strings.Repeat("x", outboxdb.MaxOutboxName+1)
	require.EqualError(t, outboxdb.CheckName(long), `table name "`+long+`" is 50 bytes, at most 49: the relay's own tables `+
		`are named after it ("`+long+`_relay_offsets" and others) and PostgreSQL identifiers hold 63 bytes`)
	require.Len(t, long+"_relay_offsets", 64, "one byte more than PostgreSQL keeps")
}

// Each path's delivered predicate: the fast and compatible paths' stamp,
// the WAL path's snapshots (a row is delivered when its transaction is
// visible in the snapshot recorded as delivered and not in the slot's
// start), and pending as neither. Counted the same by ReadPending.
func TestDeliveredPredicatesOfEachPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, tables := setup(t)

	// A transaction open at the slot's start, committed after it: its
	// rows are streamed. Those committed before the start, after it
	// began, are not, though their transaction ids are past its own.
	early, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	earlyRows := insert(t, early, "orders", 1)
	before := insert(t, db, "orders", 2)
	created := snapshot(t, db)
	require.NoError(t, early.Commit())
	streamed := slices.Concat(earlyRows, insert(t, db, "orders", 3)) // committed before the delivered snapshot
	// A transaction open at the delivered snapshot, committed after it,
	// with a later one committed before (the snapshot's xmax passes it).
	open, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	inFlight := insert(t, open, "payments", 1)
	streamed = slices.Concat(streamed, insert(t, db, "orders", 1))
	delivered := snapshot(t, db)
	require.NoError(t, open.Commit())
	after := insert(t, db, "payments", 2) // committed after the delivered snapshot
	stamped := insert(t, db, "orders", 2)
	_, err = db.Exec(`UPDATE outbox_events SET delivered_at = now() WHERE id = ANY($1)`, stamped)
	require.NoError(t, err)

	all := slices.Concat(before, streamed, inFlight, after, stamped)
	slices.Sort(all)
	query := func(d outboxdb.Delivery, cond func(string) string) []int64 {
		return ids(t, db, `SELECT id FROM outbox_events o WHERE `+cond("o")+` ORDER BY id`)
	}
	sorted := func(s ...[]int64) []int64 { c := slices.Concat(s...); slices.Sort(c); return c }

	// No WAL relay ran: the stamp alone tells.
	d, err := tables.ReadDelivery(ctx, db)
	require.NoError(t, err)
	require.False(t, d.WAL())
	require.Equal(t, stamped, query(d, d.Delivered))
	require.Equal(t, []int64{}, query(d, d.ByWAL))
	require.Equal(t, sorted(before, streamed, inFlight, after), query(d, d.Pending))
	p, err := outboxdb.ReadPending(ctx, db, tables, 0)
	require.NoError(t, err)
	require.Equal(t, int64(10), p.Count)

	// A WAL relay recorded its start and what it delivered.
	_, err = db.Exec(progressDDL)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO outbox_events_wal_progress (slot, created, delivered) VALUES ('s', $1, $2)`, created, delivered)
	require.NoError(t, err)
	d, err = tables.ReadDelivery(ctx, db)
	require.NoError(t, err)
	require.True(t, d.WAL())
	require.Equal(t, streamed, query(d, d.ByWAL), "committed between the slot's start and the delivered snapshot")
	require.Equal(t, stamped, query(d, outboxdb.Stamped))
	require.Equal(t, sorted(streamed, stamped), query(d, d.Delivered))
	require.Equal(t, sorted(before, inFlight, after), query(d, d.Pending))
	for _, id := range all {
		got, err := tables.WALDelivered(ctx, db, id)
		require.NoError(t, err)
		require.Equal(t, slices.Contains(streamed, id), got, "row %d", id)
	}

	p, err = outboxdb.ReadPending(ctx, db, tables, 0)
	require.NoError(t, err)
	require.False(t, p.Capped)
	require.Equal(t, int64(5), p.Count)
	require.Equal(t, []outboxdb.TopicPending{{Topic: "orders", Pending: 2}, {Topic: "payments", Pending: 3}},
		withoutTimes(p.Topics))

	// A slot recreated from now on (a new start, nothing delivered yet)
	// delivered nothing.
	_, err = db.Exec(`UPDATE outbox_events_wal_progress SET created = $1, delivered = NULL`, snapshot(t, db))
	require.NoError(t, err)
	require.Equal(t, []int64{}, query(d, d.ByWAL))

	// Cleanup deletes the rows the WAL path delivered, written before the
	// cutoff, and nothing else.
	_, err = db.Exec(`UPDATE outbox_events_wal_progress SET created = $1, delivered = $2`, created, delivered)
	require.NoError(t, err)
	n, err := tables.DeleteWALDelivered(ctx, db, time.Now().Add(time.Hour), 2)
	require.NoError(t, err)
	require.Equal(t, int64(len(streamed)), n)
	require.Equal(t, sorted(before, inFlight, after, stamped), ids(t, db, `SELECT id FROM outbox_events ORDER BY id`))
}

// ReadPending walks at most its bound of pending rows, in id order: the
// counts stop there and say so, and the oldest is the oldest of those.
func TestReadPendingStopsAtItsBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, tables := setup(t)
	orders := insert(t, db, "orders", 30)
	payments := insert(t, db, "payments", 20)
	_, err := db.Exec(`UPDATE outbox_events SET created_at = now() - interval '1 hour' WHERE id = $1`, orders[10])
	require.NoError(t, err)
	_, err = db.Exec(`UPDATE outbox_events SET created_at = now() - interval '2 hours' WHERE id = $1`, payments[5])
	require.NoError(t, err)

	p, err := outboxdb.ReadPending(ctx, db, tables, 35)
	require.NoError(t, err)
	require.True(t, p.Capped)
	require.Equal(t, int64(35), p.Count)
	require.Equal(t, []outboxdb.TopicPending{{Topic: "orders", Pending: 30}, {Topic: "payments", Pending: 5}},
		withoutTimes(p.Topics), "the first 35 by id")
	require.InDelta(t, time.Hour.Seconds(), p.At.Sub(p.Oldest).Seconds(), 60,
		"the older row (payments' sixth) lies past the bound")

	p, err = outboxdb.ReadPending(ctx, db, tables, 50)
	require.NoError(t, err)
	require.True(t, p.Capped, "exactly the bound: at least that many")
	p, err = outboxdb.ReadPending(ctx, db, tables, 0)
	require.NoError(t, err)
	require.False(t, p.Capped)
	require.Equal(t, int64(50), p.Count)
	require.InDelta(t, (2 * time.Hour).Seconds(), p.At.Sub(p.Oldest).Seconds(), 60)
}

func withoutTimes(ts []outboxdb.TopicPending) []outboxdb.TopicPending {
	out := make([]outboxdb.TopicPending, len(ts))
	for i, tp := range ts {
		out[i] = outboxdb.TopicPending{Topic: tp.Topic, Pending: tp.Pending}
	}
	return out
}

// Open letters only (neither retried nor discarded), by source, each
// counted up to the bound.
func TestReadOpenDeadLettersCountsOpenOnesUpToItsBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, tables := setup(t)
	_, err := db.Exec(`INSERT INTO outbox_dead_letters (event_id, source, event_name, event_version, topic,
			aggregate_type, aggregate_id, payload, reason, attempts, created_at, retried_at, discarded_at)
		SELECT gen_random_uuid(), s.source, 'order.paid', 1, 'orders', 'Order', '1', '{}', 'x', 1, now(), s.retried, s.discarded
		FROM (VALUES ('relay', NULL::timestamptz, NULL::timestamptz), ('relay', NULL, NULL), ('relay', NULL, NULL),
			('relay', now(), NULL), ('billing', NULL, NULL), ('audit', NULL, NULL), ('billing', NULL, now())) s(source, retried, discarded)`)
	require.NoError(t, err)
	n, err := outboxdb.ReadOpenDeadLetters(ctx, db, tables, 0)
	require.NoError(t, err)
	require.Equal(t, outboxdb.OpenDeadLetters{Relay: 3, Consumer: 2}, n)
	n, err = outboxdb.ReadOpenDeadLetters(ctx, db, tables, 2)
	require.NoError(t, err)
	require.Equal(t, outboxdb.OpenDeadLetters{Relay: 2, Consumer: 2}, n)
}

// The slots are those the WAL relays registered, by name, whatever their
// publication is named; one dropped from the server stays listed, as gone.
func TestReadSlotsListsTheRegisteredSlots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, tables := setup(t)
	slots, err := outboxdb.ReadSlots(ctx, db, tables)
	require.NoError(t, err)
	require.Empty(t, slots, "no WAL relay ran")

	_, err = db.Exec(progressDDL)
	require.NoError(t, err)
	name := "t" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	gone := name + "_gone"
	_, err = db.Exec(`INSERT INTO outbox_events_wal_progress (slot) VALUES ($1)`, gone)
	require.NoError(t, err)
	slots, err = outboxdb.ReadSlots(ctx, db, tables)
	require.NoError(t, err)
	require.Equal(t, []outboxdb.WALSlot{{Slot: gone}}, slots)

	pgtest.RequireLogical(t, db) // for the rest
	// A slot named apart from any publication, and one of the server's
	// the outbox's relays never registered.
	slot, other := name+"_slot", name+"_other"
	for _, s := range []string{slot, other} {
		_, err = db.Exec(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, s)
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = db.Exec(`SELECT pg_drop_replication_slot($1)`, s) })
	}
	_, err = db.Exec(`INSERT INTO outbox_events_wal_progress (slot) VALUES ($1)`, slot)
	require.NoError(t, err)
	insert(t, db, "orders", 50) // WAL written since the slot's start
	slots, err = outboxdb.ReadSlots(ctx, db, tables)
	require.NoError(t, err)
	require.Len(t, slots, 2)
	require.Equal(t, outboxdb.WALSlot{Slot: gone}, slots[0])
	require.Equal(t, slot, slots[1].Slot)
	require.True(t, slots[1].Exists)
	require.False(t, slots[1].Active)
	require.Positive(t, slots[1].RetainedBytes)
	require.Positive(t, slots[1].LagBytes)
	require.Equal(t, "reserved", slots[1].WALStatus)
}

// The shares: who owns how many partitions of which topic, whose lease
// lapsed, and whose liveness lock a session holds (LiveHeld reads the key
// LiveKey gives).
func TestReadSharesTellsLeasesAndLiveness(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, tables := setup(t)
	parts, shares, err := outboxdb.ReadShares(ctx, db, tables)
	require.NoError(t, err)
	require.Zero(t, parts)
	require.Empty(t, shares, "no fast relay ran")

	// The tables as the fast relay creates them.
	_, err = db.Exec(`CREATE TABLE outbox_events_partitions (topic text NOT NULL, partition int NOT NULL,
			relay text NOT NULL DEFAULT '', until timestamptz NOT NULL DEFAULT '-infinity', PRIMARY KEY (topic, partition));
		CREATE TABLE outbox_events_relays (topic text NOT NULL, relay text NOT NULL, until timestamptz NOT NULL,
			live_lock boolean NOT NULL DEFAULT false, PRIMARY KEY (topic, relay));
		INSERT INTO outbox_events_partitions (topic, partition, relay, until) VALUES
			('', 0, 'a', now() + interval '1 minute'), ('', 1, 'a', now() + interval '1 minute'),
			('', 2, 'b', now() - interval '1 minute'), ('', 3, '', '-infinity'),
			('orders', 0, 'a', now() + interval '1 minute');
		INSERT INTO outbox_events_relays (topic, relay, until, live_lock) VALUES
			('', 'a', now() + interval '1 minute', true), ('', 'b', now(), false)`)
	require.NoError(t, err)
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, `SELECT pg_advisory_lock(`+outboxdb.LiveKey(tables.Outbox, "$1")+`)`, "a")
	require.NoError(t, err)

	parts, shares, err = outboxdb.ReadShares(ctx, db, tables)
	require.NoError(t, err)
	require.Equal(t, 4, parts)
	for i := range shares {
		shares[i].LeaseUntil = time.Time{}
	}
	require.Equal(t, []outboxdb.Share{
		{Relay: "a", Topic: "", Partitions: 2, Locks: true, Live: true},
		{Relay: "b", Topic: "", Partitions: 1, Lapsed: true},
		{Relay: "a", Topic: "orders", Partitions: 1, Live: true},
	}, shares)
}

// The summary counts each state up to its bound and says when it stopped
// there; the sources and reasons are those of the newest open letters
// counted.
func TestReadDeadLetterSummaryStopsAtItsBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, tables := setup(t)
	_, err := db.Exec(`INSERT INTO outbox_dead_letters (event_id, source, reason, attempts, created_at, retried_at, discarded_at)
		SELECT gen_random_uuid(), s.source, s.reason, 1, now(), s.retried, s.discarded
		FROM (VALUES ('billing', 'bug', NULL::timestamptz, NULL::timestamptz), ('billing', 'bug', NULL, NULL),
			('billing', 'bug', now(), NULL), ('relay', 'no route', NULL, NULL), ('relay', 'no route', NULL, NULL),
			('relay', 'refused', NULL, NULL), ('audit', 'disk full', NULL, now()), ('audit', 'disk full', now(), NULL))
			s(source, reason, retried, discarded)`)
	require.NoError(t, err)

	s, err := outboxdb.ReadDeadLetterSummary(ctx, db, tables, 0, 10)
	require.NoError(t, err)
	require.Equal(t, outboxdb.DeadLetterSummary{Open: 5, Retried: 2, Discarded: 1,
		BySource: []outboxdb.SourceCount{{Source: "relay", Count: 3, Reasons: 2}, {Source: "billing", Count: 2, Reasons: 1}},
		ByReason: []outboxdb.ReasonCount{{Source: "relay", Reason: "no route", Example: "no route", Count: 2},
			{Source: "relay", Reason: "refused", Example: "refused", Count: 1},
			{Source: "billing", Reason: "bug", Example: "bug", Count: 2}}}, s)

	// Bounded at 2: at least 2 open and 2 retried; the two newest open
	// letters are the relay's.
	s, err = outboxdb.ReadDeadLetterSummary(ctx, db, tables, 2, 1)
	require.NoError(t, err)
	require.Equal(t, outboxdb.DeadLetterSummary{Open: 2, OpenCapped: true, Retried: 2, RetriedCapped: true, Discarded: 1,
		BySource: []outboxdb.SourceCount{{Source: "relay", Count: 2, Reasons: 2}},
		ByReason: []outboxdb.ReasonCount{{Source: "relay", Reason: "no route", Example: "no route", Count: 1}}}, s)
}

// letter is a dead letter as the tests read it back.
type letter struct {
	eventID                sql.NullString
	source, name, topic    string
	version, attempts      int
	aggType, aggID, reason string
	seq                    sql.NullInt64
	payload                string
	headers                sql.NullString
}

func readLetters(t *testing.T, db *sql.DB) []letter {
	t.Helper()
	rows, err := db.Query(`SELECT event_id::text, source, event_name, event_version, topic, aggregate_type, aggregate_id,
		aggregate_seq, convert_from(payload, 'UTF8'), headers::text, reason, attempts FROM outbox_dead_letters ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []letter
	for rows.Next() {
		var l letter
		require.NoError(t, rows.Scan(&l.eventID, &l.source, &l.name, &l.version, &l.topic, &l.aggType, &l.aggID, &l.seq,
			&l.payload, &l.headers, &l.reason, &l.attempts))
		out = append(out, l)
	}
	require.NoError(t, rows.Err())
	return out
}

// A move takes the row out of the outbox and writes its letter, with the
// reason and the larger of the row's attempts and the ones given; a row
// already gone moves nothing and says so. Inside a transaction that rolls
// back, nothing moved.
func TestMoveToDeadLettersMovesTheRowWhole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, tables := setup(t)
	id := uuid.New()
	var rowID int64
	require.NoError(t, db.QueryRow(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type,
		aggregate_id, aggregate_seq, payload, headers, attempts) VALUES ($1, 'order.paid', 2, 'orders', 'Order', 'o-1', 7,
		'{"amount": 5}', '{"correlation_id": "c-1"}', 4) RETURNING id`, id).Scan(&rowID))
	other := insert(t, db, "orders", 1)[0]

	tx, err := db.Begin()
	require.NoError(t, err)
	moved, err := tables.MoveToDeadLetters(ctx, tx, rowID, "rejected", 2)
	require.NoError(t, err)
	require.True(t, moved)
	require.NoError(t, tx.Rollback())
	require.Empty(t, readLetters(t, db), "rolled back with its transaction")

	moved, err = tables.MoveToDeadLetters(ctx, db, rowID, "rejected", 2)
	require.NoError(t, err)
	require.True(t, moved)
	require.Equal(t, []letter{{eventID: sql.NullString{String: id.String(), Valid: true}, source: "relay",
		name: "order.paid", version: 2, topic: "orders", aggType: "Order", aggID: "o-1", seq: sql.NullInt64{Int64: 7, Valid: true},
		payload: `{"amount": 5}`, headers: sql.NullString{String: `{"correlation_id": "c-1"}`, Valid: true},
		reason: "rejected", attempts: 4}}, readLetters(t, db), "the row's own attempts, more than given")
	require.Equal(t, []int64{other}, ids(t, db, `SELECT id FROM outbox_events ORDER BY id`))

	moved, err = tables.MoveToDeadLetters(ctx, db, rowID, "rejected", 2)
	require.NoError(t, err)
	require.False(t, moved, "gone already")
	require.Len(t, readLetters(t, db), 1)

	moved, err = tables.MoveToDeadLetters(ctx, db, other, "refused for good", 9)
	require.NoError(t, err)
	require.True(t, moved)
	require.Equal(t, 9, readLetters(t, db)[1].attempts, "the attempts given, more than the row's")
}

// The letter of a row gone from the outbox is written from what the read
// path carried; what it lacks is NULL.
func TestWriteDeadLetterFromACarriedRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, tables := setup(t)
	id := uuid.New()
	written, err := tables.WriteDeadLetter(ctx, db, outboxdb.CarriedRow{ID: 5, EventID: id, Name: "order.paid",
		Version: 2, Topic: "orders", AggregateType: "Order", AggregateID: "o-1", AggregateSeq: 3,
		Payload: []byte(`{"a":1}`), Headers: []byte(`{"k":"v"}`)}, "gone", 1)
	require.NoError(t, err)
	require.True(t, written)
	written, err = tables.WriteDeadLetter(ctx, db, outboxdb.CarriedRow{ID: 6, Name: "order.paid", Version: 1,
		Topic: "orders", AggregateType: "Order", AggregateID: "o-2", Payload: []byte(`not json`)}, "gone too", 0)
	require.NoError(t, err)
	require.True(t, written)
	require.Equal(t, []letter{
		{eventID: sql.NullString{String: id.String(), Valid: true}, source: "relay", name: "order.paid", version: 2,
			topic: "orders", aggType: "Order", aggID: "o-1", seq: sql.NullInt64{Int64: 3, Valid: true}, payload: `{"a":1}`,
			headers: sql.NullString{String: `{"k": "v"}`, Valid: true}, reason: "gone", attempts: 1},
		{source: "relay", name: "order.paid", version: 1, topic: "orders", aggType: "Order", aggID: "o-2",
			payload: "not json", reason: "gone too"},
	}, readLetters(t, db))
}

// A row read again after its move (a WAL relay killed before its slot
// confirmed the row) finds it gone: its letter is not written again, nor
// by writers racing each other, nor once the letter was retried. Another
// source's letter of the event, and a row without an event id, do not
// stand in the way.
func TestWriteDeadLetterOncePerEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, tables := setup(t)
	var (
		rowID int64
		id    uuid.UUID
	)
	require.NoError(t, db.QueryRow(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type,
		aggregate_id, payload) VALUES (gen_random_uuid(), 'order.paid', 1, '', 'Order', 'o-1', '{}')
		RETURNING id, event_id`).Scan(&rowID, &id))
	moved, err := tables.MoveToDeadLetters(ctx, db, rowID, "topic is empty", 0)
	require.NoError(t, err)
	require.True(t, moved)
	carried := outboxdb.CarriedRow{ID: rowID, EventID: id, Name: "order.paid", Version: 1, AggregateType: "Order",
		AggregateID: "o-1", Payload: []byte(`{}`)}
	countOf := func(id uuid.UUID) int {
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM outbox_dead_letters WHERE event_id = $1 OR retried_event_id = $1`,
			id).Scan(&n))
		return n
	}

	written, err := tables.WriteDeadLetter(ctx, db, carried, "topic is empty (gone)", 0)
	require.NoError(t, err)
	require.False(t, written, "the moved row has its letter")
	require.Equal(t, 1, countOf(id))

	// Racing writers of one letter, on connections already open and let
	// go at once, round after round: the lock lets one write it.
	const writers, rounds = 8, 20
	db.SetMaxIdleConns(writers)
	var conns []*sql.Conn
	for range writers {
		c, err := db.Conn(ctx)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	for _, c := range conns {
		require.NoError(t, c.Close())
	}
	for round := range rounds {
		racing := carried
		racing.EventID = uuid.New()
		start := make(chan struct{})
		results := make(chan error, writers)
		var wrote atomic.Int32
		for range writers {
			go func() {
				<-start
				w, err := tables.WriteDeadLetter(ctx, db, racing, "gone", 0)
				if w {
					wrote.Add(1)
				}
				results <- err
			}()
		}
		close(start)
		for range writers {
			require.NoError(t, <-results)
		}
		require.Equal(t, int32(1), wrote.Load(), "round %d: writers that wrote", round)
		require.Equal(t, 1, countOf(racing.EventID), "round %d", round)
	}

	// Retried, the event went back to the outbox: a stale row of it
	// writes nothing either.
	_, err = db.Exec(`UPDATE outbox_dead_letters SET retried_at = now(), retried_event_id = event_id, event_id = NULL
		WHERE event_id = $1`, id)
	require.NoError(t, err)
	written, err = tables.WriteDeadLetter(ctx, db, carried, "topic is empty (gone)", 0)
	require.NoError(t, err)
	require.False(t, written, "the retried letter stands for the event")
	require.Equal(t, 1, countOf(id))

	// A consumer's letter is another cause.
	other := carried
	other.EventID = uuid.New()
	_, err = db.Exec(`INSERT INTO outbox_dead_letters (event_id, source, reason, attempts) VALUES ($1, 'billing', 'failed', 5)`,
		other.EventID)
	require.NoError(t, err)
	written, err = tables.WriteDeadLetter(ctx, db, other, "gone", 0)
	require.NoError(t, err)
	require.True(t, written, "the consumer's letter is not the relay's")
	require.Equal(t, 2, countOf(other.EventID))

	// Without an event id nothing tells two rows apart: each is written.
	for range 2 {
		written, err = tables.WriteDeadLetter(ctx, db, outboxdb.CarriedRow{ID: 9, Name: "order.paid", Version: 1}, "gone", 0)
		require.NoError(t, err)
		require.True(t, written)
	}
}
