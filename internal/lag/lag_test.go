package lag_test

import (
	"context"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/ent"
	"github.com/entoutbox/entoutbox/internal/lag"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/outbox"
	"github.com/entoutbox/entoutbox/schema"
)

// emit writes n events of one aggregate as Emit does, numbered by the
// aggregate's counter, and dates the k-th of them (from 0) ages[k] ago.
func emit(t *testing.T, db *pgtest.DB, topic, aggregateID string, ages ...time.Duration) {
	t.Helper()
	rows := make([]outbox.Row, len(ages))
	for i := range rows {
		rows[i] = outbox.Row{EventID: uuid.New(), Event: outbox.Event{Name: "order.paid", Version: 1, Topic: topic,
			AggregateType: "Order", AggregateID: aggregateID, Payload: []byte(`{}`)}}
	}
	q, args, err := outbox.InsertNumberedQuery(schema.OutboxTable, schema.AggregateSequenceTable, rows)
	require.NoError(t, err)
	_, err = db.DB.Exec(q, args...)
	require.NoError(t, err)
	for i, r := range rows {
		_, err := db.DB.Exec(`UPDATE outbox_events SET created_at = now() - make_interval(secs => $1) WHERE event_id = $2`,
			ages[i].Seconds(), r.EventID)
		require.NoError(t, err)
	}
}

// position sets consumer's position on an aggregate of topic.
func position(t *testing.T, db *pgtest.DB, consumer, topic, aggregateID string, seq int) {
	t.Helper()
	_, err := db.DB.Exec(`INSERT INTO outbox_consumer_positions (consumer, topic, aggregate_type, aggregate_id, last_seq, updated_at)
		VALUES ($1, $2, 'Order', $3, $4, now())
		ON CONFLICT (consumer, topic, aggregate_type, aggregate_id) DO UPDATE SET last_seq = excluded.last_seq`,
		consumer, topic, aggregateID, seq)
	require.NoError(t, err)
}

func newDB(t *testing.T) *pgtest.DB {
	t.Helper()
	db := pgtest.New(t)
	pgtest.Migrate(t, ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db.DB))).Schema.Create)
	return db
}

// byKey indexes a reading by consumer and topic.
func byKey(r lag.Reading) map[[2]string]lag.Lag {
	m := map[[2]string]lag.Lag{}
	for _, l := range r.Lags {
		m[[2]string{l.Consumer, l.Topic}] = l
	}
	return m
}

// ageOf is how long before the reading l's oldest was written.
func ageOf(r lag.Reading, l lag.Lag) time.Duration { return r.At.Sub(l.Oldest) }

// Each consumer name with positions is behind, on each topic it has
// positions on, by the events past its positions, aggregates it has no
// position on counting whole; the oldest is the first event past its
// position on the aggregate behind the longest.
func TestReadCountsWhatEachConsumerHasNotHandled(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	emit(t, db, "orders", "1", 5*time.Hour, 4*time.Hour, 3*time.Hour)
	emit(t, db, "orders", "2", 2*time.Hour, time.Hour)
	emit(t, db, "orders", "3", 30*time.Minute)
	emit(t, db, "invoices", "1", 10*time.Minute, 5*time.Minute)
	emit(t, db, "refunds", "1", time.Minute) // nobody has a position on it
	position(t, db, "billing", "orders", "1", 1)
	position(t, db, "billing", "orders", "2", 2)
	position(t, db, "billing", "invoices", "1", 2)
	position(t, db, "audit", "orders", "2", 1)

	r, err := lag.Read(ctx, db.DB, lag.Config{})
	require.NoError(t, err)
	got := byKey(r)
	require.Len(t, got, 3, "a consumer has lag on the topics it has positions on: %+v", r.Lags)

	billing := got[[2]string{"billing", "orders"}]
	require.Equal(t, int64(3), billing.Events, "Order/1 seq 2 and 3, Order/3 (no position) seq 1")
	require.Equal(t, billing.Events, billing.Located)
	require.InDelta(t, (4 * time.Hour).Seconds(), ageOf(r, billing).Seconds(), 60, "Order/1 seq 2, the first past its position")

	audit := got[[2]string{"audit", "orders"}]
	require.Equal(t, int64(5), audit.Events, "Order/1 whole (no position), Order/2 seq 2, Order/3 whole")
	require.Equal(t, audit.Events, audit.Located)
	require.InDelta(t, (5 * time.Hour).Seconds(), ageOf(r, audit).Seconds(), 60, "Order/1 seq 1: audit has no position on it")

	invoices := got[[2]string{"billing", "invoices"}]
	require.Equal(t, int64(0), invoices.Events)
	require.True(t, invoices.Oldest.IsZero(), "nothing behind, no oldest")

	// Handling everything brings each to 0; a consumer whose positions
	// are gone (cleared for a rebuild) is gone from the reading.
	position(t, db, "billing", "orders", "1", 3)
	position(t, db, "billing", "orders", "3", 1)
	_, err = db.DB.Exec(`DELETE FROM outbox_consumer_positions WHERE consumer = 'audit'`)
	require.NoError(t, err)
	r, err = lag.Read(ctx, db.DB, lag.Config{})
	require.NoError(t, err)
	require.Equal(t, []lag.Lag{
		{Consumer: "billing", Topic: "invoices"},
		{Consumer: "billing", Topic: "orders"},
	}, r.Lags)
}

// Where the rows of the events behind are gone, or beyond the rows a read
// walks, the age is of those found: a lower bound, and Located says how
// many; none found leaves the age unknown.
func TestReadLocatesWhatTheOutboxStillHolds(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	emit(t, db, "orders", "1", 3*time.Hour, 2*time.Hour, time.Hour)
	emit(t, db, "orders", "2", 30*time.Minute)
	position(t, db, "billing", "orders", "2", 0)

	// Only the newest two rows walked: Order/2 seq 1 and Order/1 seq 3.
	r, err := lag.Read(ctx, db.DB, lag.Config{MaxRows: 2})
	require.NoError(t, err)
	l := byKey(r)[[2]string{"billing", "orders"}]
	require.Equal(t, int64(4), l.Events)
	require.Equal(t, int64(2), l.Located)
	require.InDelta(t, time.Hour.Seconds(), ageOf(r, l).Seconds(), 60)

	// Delivered rows deleted (a relay with --delete-delivered, cleanup):
	// the count stands, the oldest is of what is left.
	_, err = db.DB.Exec(`DELETE FROM outbox_events WHERE aggregate_id = '1' AND aggregate_seq < 3`)
	require.NoError(t, err)
	r, err = lag.Read(ctx, db.DB, lag.Config{})
	require.NoError(t, err)
	l = byKey(r)[[2]string{"billing", "orders"}]
	require.Equal(t, int64(4), l.Events, "the count comes from the counters, not the rows")
	require.Equal(t, int64(2), l.Located)
	require.InDelta(t, time.Hour.Seconds(), ageOf(r, l).Seconds(), 60)

	_, err = db.DB.Exec(`DELETE FROM outbox_events`)
	require.NoError(t, err)
	r, err = lag.Read(ctx, db.DB, lag.Config{})
	require.NoError(t, err)
	l = byKey(r)[[2]string{"billing", "orders"}]
	require.Equal(t, lag.Lag{Consumer: "billing", Topic: "orders", Events: 4}, l, "behind, the oldest unknown")
}

// A database without the counters or the positions has no lag.
func TestReadWithoutTheTables(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	_, err := db.DB.Exec(`CREATE TABLE outbox_events (id bigint)`)
	require.NoError(t, err)
	r, err := lag.Read(context.Background(), db.DB, lag.Config{})
	require.NoError(t, err)
	require.Empty(t, r.Lags)
}
