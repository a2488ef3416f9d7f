package outboxdb_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// schedule writes n scheduled rows of topic due at now() + in, and returns
// their event ids.
func schedule(t *testing.T, db *sql.DB, topic string, n int, in time.Duration) []uuid.UUID {
	t.Helper()
	rows, err := db.Query(`INSERT INTO outbox_scheduled_events
		(event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, deliver_at, created_at)
		SELECT gen_random_uuid(), 'order.reminded', 1, $1, 'Order', g::text, '{"n":1}',
			clock_timestamp() + make_interval(secs => $3), now()
		FROM generate_series(1, $2) g RETURNING event_id`, topic, n, in.Seconds())
	require.NoError(t, err)
	defer rows.Close()
	var out []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		require.NoError(t, rows.Scan(&id))
		out = append(out, id)
	}
	require.NoError(t, rows.Err())
	return out
}

func TestReadScheduledCountsWaitingOverdueAndCancelled(t *testing.T) {
	t.Parallel()
	db, tables := setup(t)
	ctx := context.Background()

	s, err := outboxdb.ReadScheduled(ctx, db, tables, 0)
	require.NoError(t, err)
	require.True(t, s.Exists)
	require.Zero(t, s.Waiting)
	require.True(t, s.NextDue.IsZero())
	require.Zero(t, s.OverdueBy())

	schedule(t, db, "orders", 3, time.Hour)
	schedule(t, db, "orders", 2, -time.Minute) // due, not moved: overdue
	schedule(t, db, "mail", 1, 2*time.Hour)
	cancel := schedule(t, db, "mail", 4, time.Hour)
	_, err = db.Exec(`UPDATE outbox_scheduled_events SET cancelled_at = clock_timestamp() WHERE event_id = ANY($1)`,
		uuidArray(cancel))
	require.NoError(t, err)

	s, err = outboxdb.ReadScheduled(ctx, db, tables, 0)
	require.NoError(t, err)
	require.Equal(t, int64(6), s.Waiting)
	require.Equal(t, int64(2), s.Overdue)
	require.Equal(t, int64(4), s.Cancelled)
	require.False(t, s.WaitingCapped || s.OverdueCapped || s.CancelledCapped)
	require.InDelta(t, time.Minute.Seconds(), s.OverdueBy().Seconds(), 30, "due a minute ago by the database's clock")
	require.Len(t, s.Topics, 2)
	require.Equal(t, outboxdb.TopicScheduled{Topic: "orders", Waiting: 5, Overdue: 2, NextDue: s.NextDue}, s.Topics[0])
	require.Equal(t, "mail", s.Topics[1].Topic)
	require.Equal(t, int64(1), s.Topics[1].Waiting)
	require.InDelta(t, 2*time.Hour.Seconds(), s.Topics[1].NextDue.Sub(s.At).Seconds(), 30)

	// Bounded: the earliest due are counted first, so the overdue ones are.
	s, err = outboxdb.ReadScheduled(ctx, db, tables, 3)
	require.NoError(t, err)
	require.Equal(t, int64(3), s.Waiting)
	require.True(t, s.WaitingCapped)
	require.Equal(t, int64(2), s.Overdue)
	require.False(t, s.OverdueCapped)
	require.Equal(t, int64(3), s.Cancelled)
	require.True(t, s.CancelledCapped)
}

func TestReadScheduledWithoutTheTable(t *testing.T) {
	t.Parallel()
	db, tables := setup(t)
	tables.Scheduled = "no_scheduled_events"
	s, err := outboxdb.ReadScheduled(context.Background(), db, tables, 0)
	require.NoError(t, err)
	require.False(t, s.Exists)
	require.Zero(t, s.Waiting)
	require.False(t, s.At.IsZero())
	_, err = tables.ReadScheduledOfEvent(context.Background(), db, uuid.New())
	require.ErrorIs(t, err, sql.ErrNoRows)
}

func TestReadScheduledOfEvent(t *testing.T) {
	t.Parallel()
	db, tables := setup(t)
	ctx := context.Background()
	ids := schedule(t, db, "orders", 2, time.Hour)
	_, err := db.Exec(`UPDATE outbox_scheduled_events SET cancelled_at = clock_timestamp() WHERE event_id = $1`, ids[1])
	require.NoError(t, err)

	r, err := tables.ReadScheduledOfEvent(ctx, db, ids[0])
	require.NoError(t, err)
	require.Equal(t, ids[0], r.EventID)
	require.Equal(t, "order.reminded", r.EventName)
	require.Equal(t, "orders", r.Topic)
	require.JSONEq(t, `{"n":1}`, string(r.Payload))
	require.Nil(t, r.CancelledAt)
	require.InDelta(t, time.Hour.Seconds(), r.DeliverAt.Sub(r.CreatedAt).Seconds(), 30)

	r, err = tables.ReadScheduledOfEvent(ctx, db, ids[1])
	require.NoError(t, err)
	require.NotNil(t, r.CancelledAt)

	_, err = tables.ReadScheduledOfEvent(ctx, db, uuid.New())
	require.ErrorIs(t, err, sql.ErrNoRows)
}

func uuidArray(ids []uuid.UUID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}
