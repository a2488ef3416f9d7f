package relay_test

import (
	"context"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/outbox"
)

// scheduledRow is a row of the scheduled events as stored.
type scheduledRow struct {
	EventID     uuid.UUID
	Name        string
	AggregateID string
	DeliverAt   time.Time
	Cancelled   bool
}

func (b *emitBundle) scheduled(t *testing.T) []scheduledRow {
	t.Helper()
	rs, err := b.db.DB.Query(`SELECT event_id, event_name, aggregate_id, deliver_at, cancelled_at IS NOT NULL
		FROM outbox_scheduled_events ORDER BY id`)
	require.NoError(t, err)
	defer rs.Close()
	var out []scheduledRow
	for rs.Next() {
		var r scheduledRow
		require.NoError(t, rs.Scan(&r.EventID, &r.Name, &r.AggregateID, &r.DeliverAt, &r.Cancelled))
		out = append(out, r)
	}
	require.NoError(t, rs.Err())
	return out
}

// dbNow is the database's clock.
func (b *emitBundle) dbNow(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, b.db.DB.QueryRow(`SELECT clock_timestamp()`).Scan(&now))
	return now
}

func reminder(order int64) testent.PaymentReminder {
	return testent.PaymentReminder{OrderID: order}
}

// TestEmitDeliverAtWritesTheScheduledRow: DeliverAt writes the event into
// the scheduled events, due at exactly that time, and nothing into the
// outbox; the transaction's Scheduled lists it, Emitted does not.
func TestEmitDeliverAtWritesTheScheduledRow(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	at := time.Now().Add(2 * time.Hour).Truncate(time.Microsecond) // PostgreSQL keeps microseconds
	var (
		id      uuid.UUID
		listed  []*testent.ScheduledEvent
		emitted []*testent.Outbox
	)
	require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
		if err := tx.Outbox.EmitPaymentReminder(ctx, 7, reminder(7), events.DeliverAt(at), events.ReturnEventID(&id)); err != nil {
			return err
		}
		var err error
		if listed, err = tx.Outbox.Scheduled(ctx); err != nil {
			return err
		}
		emitted, err = tx.Outbox.Emitted(ctx)
		return err
	}))
	require.Empty(t, emitted)
	require.Len(t, listed, 1)
	require.Equal(t, id, listed[0].EventID)
	require.True(t, at.Equal(listed[0].DeliverAt), "due %s, want %s", listed[0].DeliverAt, at)
	rows := b.scheduled(t)
	require.Len(t, rows, 1)
	require.Equal(t, id, rows[0].EventID)
	require.Equal(t, "payment.reminder", rows[0].Name)
	require.Equal(t, "7", rows[0].AggregateID)
	require.True(t, at.Equal(rows[0].DeliverAt), "due %s, want %s", rows[0].DeliverAt, at)
	require.False(t, rows[0].Cancelled)
	require.Empty(t, b.rows(t), "a scheduled event is not in the outbox before it is due")
}

// TestEmitDeliverAfterUsesTheDatabaseClock: DeliverAfter(d) is due at the
// database's time of the write plus d: between the database's clock read
// before and after the transaction, plus d. The statement carries d, not a
// time the application computed.
func TestEmitDeliverAfterUsesTheDatabaseClock(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	const d = 90 * time.Minute
	before := b.dbNow(t)
	require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
		return tx.Outbox.EmitPaymentReminder(ctx, 1, reminder(1), events.DeliverAfter(d))
	}))
	after := b.dbNow(t)
	rows := b.scheduled(t)
	require.Len(t, rows, 1)
	due := rows[0].DeliverAt
	require.False(t, due.Before(before.Add(d)), "due %s, before the database's clock + %s (%s)", due, d, before.Add(d))
	require.False(t, due.After(after.Add(d)), "due %s, after the database's clock + %s (%s)", due, d, after.Add(d))

	query, args, err := outbox.InsertScheduledQuery("outbox_events", "", "outbox_scheduled_events",
		[]outbox.Row{{EventID: uuid.New(), Event: outbox.Event{Name: "payment.reminder", Version: 1, Topic: "reminders",
			AggregateType: "Order", AggregateID: "1", Payload: []byte(`{}`)}, Scheduled: true, DeliverAfter: d}})
	require.NoError(t, err)
	require.Contains(t, query, "clock_timestamp() +")
	for _, a := range args {
		_, isTime := a.(time.Time)
		require.False(t, isTime, "DeliverAfter sends the database a time the application computed: %v", a)
	}
}

// TestEmitScheduledRollbackWritesNone: a rolled back transaction leaves no
// scheduled event, and no aggregate counter taken.
func TestEmitScheduledRollbackWritesNone(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	tx, err := b.client.Tx(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.Outbox.EmitPaymentReminder(ctx, 1, reminder(1), events.DeliverAfter(time.Hour)))
	require.NoError(t, tx.Outbox.EmitPaymentReminder(ctx, 2, reminder(2), events.DeliverAt(time.Now().Add(time.Hour))))
	s, err := tx.Outbox.Scheduled(ctx)
	require.NoError(t, err)
	require.Len(t, s, 2)
	require.NoError(t, tx.Rollback())
	require.Empty(t, b.scheduled(t))
	require.Empty(t, b.rows(t))
}

// TestEmitScheduleRefusals: a zero time, a negative delay, a time beyond
// the event's MaxDelay and an event declared never scheduled are refused
// with a *ValidationError naming the event, nothing written, the
// transaction still usable.
func TestEmitScheduleRefusals(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	tx, err := b.client.Tx(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()

	refused := func(err error) string {
		t.Helper()
		var verr *events.ValidationError
		require.ErrorAs(t, err, &verr)
		return err.Error()
	}
	require.Equal(t, `events: invalid "payment.reminder" v1 event: DeliverAt(0001-01-01T00:00:00Z) is not a time an event is due (a zero or unset time?)`,
		refused(tx.Outbox.EmitPaymentReminder(ctx, 1, reminder(1), events.DeliverAt(time.Time{}))))
	require.Equal(t, `events: invalid "payment.reminder" v1 event: DeliverAfter(-1s) is negative; use DeliverAfter(0) to deliver at once`,
		refused(tx.Outbox.EmitPaymentReminder(ctx, 1, reminder(1), events.DeliverAfter(-time.Second))))
	require.Equal(t, `events: invalid "payment.reminder" v1 event: DeliverAfter(721h0m0s) is further ahead than the event's MaxDelay (30 days)`,
		refused(tx.Outbox.EmitPaymentReminder(ctx, 1, reminder(1), events.DeliverAfter(31*24*time.Hour-23*time.Hour))))
	err = tx.Outbox.EmitPaymentReminder(ctx, 1, reminder(1), events.DeliverAt(time.Now().Add(31*24*time.Hour)))
	require.Contains(t, refused(err), `events: invalid "payment.reminder" v1 event: DeliverAt(`)
	require.Contains(t, err.Error(), `further than the event's MaxDelay (30 days)`)
	// The default bound, 366 days, for an event that does not declare one.
	require.Equal(t, `events: invalid "order.paid" v2 event: DeliverAfter(8808h0m0s) is further ahead than the event's MaxDelay (366 days)`,
		refused(tx.Outbox.EmitOrderPaid(ctx, 1, testent.OrderPaid{OrderID: 1, AmountCents: 5}, events.DeliverAfter(367*24*time.Hour))))
	never := `events: invalid "audit.recorded" v1 event: this event is never scheduled (its declaration's MaxDelay is not positive); emit it without DeliverAt or DeliverAfter`
	require.Equal(t, never, refused(tx.Outbox.EmitAuditRecorded(ctx, "acct-1", testent.AuditRecorded{Action: "login"}, events.DeliverAfter(0))))
	require.Equal(t, never, refused(tx.Outbox.EmitAuditRecorded(ctx, "acct-1", testent.AuditRecorded{Action: "login"}, events.DeliverAt(time.Now()))))

	// Nothing was written, and the transaction goes on.
	s, err := tx.Outbox.Scheduled(ctx)
	require.NoError(t, err)
	require.Empty(t, s)
	require.NoError(t, tx.Outbox.EmitPaymentReminder(ctx, 1, reminder(1), events.DeliverAfter(30*24*time.Hour)))
	require.NoError(t, tx.Outbox.EmitAuditRecorded(ctx, "acct-1", testent.AuditRecorded{Action: "login"}))
	require.NoError(t, tx.Commit())
	require.Len(t, b.scheduled(t), 1)
	require.Len(t, b.rows(t), 1)
}

// TestEmitScheduleRefusedWithoutTheTable: a schema without ScheduledEvent
// refuses DeliverAt and DeliverAfter naming the event and what to add, and
// Cancel says the same.
func TestEmitScheduleRefusedWithoutTheTable(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	drv, err := entsql.OpenDB(dialect.Postgres, b.db.DB).Tx(ctx)
	require.NoError(t, err)
	defer func() { _ = drv.Rollback() }()
	batch := outbox.NewBatchFor(drv, outbox.Tables{Outbox: "outbox_events", Sequence: "outbox_aggregate_sequences"})
	ev := outbox.Event{Name: "payment.reminder", Version: 1, Topic: "reminders", AggregateType: "Order", AggregateID: "1",
		Payload: []byte(`{"order_id":1}`), MaxDelay: time.Hour}
	err = batch.Add(ctx, ev, events.NewEmitConfig(events.DeliverAfter(time.Minute)))
	var verr *events.ValidationError
	require.ErrorAs(t, err, &verr)
	require.EqualError(t, err, `events: invalid "payment.reminder" v1 event: DeliverAt and DeliverAfter need the scheduled events' table: `+
		`add type ScheduledEvent struct{ schema.ScheduledEvent } to your ent schema, run go generate and migrate`)
	_, err = outbox.Cancel(ctx, drv, "outbox_events", "", uuid.New())
	require.ErrorContains(t, err, "add type ScheduledEvent struct{ schema.ScheduledEvent }")
	// The event goes out at once without the option.
	require.NoError(t, batch.Add(ctx, ev, events.NewEmitConfig()))
	require.NoError(t, batch.Flush(ctx))
	require.NoError(t, drv.Commit())
	require.Len(t, b.rows(t), 1)
}

// TestEmitScheduledDuplicateEventID: an event id already scheduled, or
// already in the outbox, is refused with events.ErrDuplicateEventID
// whichever table the new event goes to, and the transaction goes on.
func TestEmitScheduledDuplicateEventID(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	scheduled, sent := uuid.New(), uuid.New()
	require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
		if err := tx.Outbox.EmitPaymentReminder(ctx, 1, reminder(1), events.DeliverAfter(time.Hour), events.WithEventID(scheduled)); err != nil {
			return err
		}
		return tx.Outbox.EmitPaymentReminder(ctx, 1, reminder(1), events.WithEventID(sent))
	}))

	tx, err := b.client.Tx(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	for _, c := range []struct {
		what string
		id   uuid.UUID
		opts []events.EmitOption
	}{
		{"scheduled again", scheduled, []events.EmitOption{events.DeliverAfter(time.Hour)}},
		{"scheduled, as in the outbox", sent, []events.EmitOption{events.DeliverAfter(time.Hour)}},
		{"sent now, as scheduled", scheduled, nil},
		{"sent again", sent, nil},
	} {
		err := tx.Outbox.EmitPaymentReminder(ctx, 1, reminder(1), append(c.opts, events.WithEventID(c.id))...)
		require.ErrorIs(t, err, events.ErrDuplicateEventID, c.what)
	}
	// The duplicates did not abort the transaction, nor took a number of
	// their aggregate.
	require.NoError(t, tx.Outbox.EmitPaymentReminder(ctx, 2, reminder(2), events.DeliverAfter(time.Hour)))
	require.NoError(t, tx.Outbox.EmitPaymentReminder(ctx, 1, reminder(1)))
	require.NoError(t, tx.Commit())
	require.Len(t, b.scheduled(t), 2)
	require.Len(t, b.rows(t), 2)
	var seqs []int64
	rs, err := b.db.DB.Query(`SELECT aggregate_seq FROM outbox_events ORDER BY id`)
	require.NoError(t, err)
	defer rs.Close()
	for rs.Next() {
		var s int64
		require.NoError(t, rs.Scan(&s))
		seqs = append(seqs, s)
	}
	require.NoError(t, rs.Err())
	require.Equal(t, []int64{1, 2}, seqs)
}

// TestCancel: a waiting event is cancelled (kept, marked), a second Cancel
// finds it already cancelled, an event in the outbox is too late, an
// unknown id is not found; a rolled back Cancel leaves the event waiting;
// an event can be cancelled in the transaction that scheduled it.
func TestCancel(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	var waiting, rolledBack, sent uuid.UUID
	require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
		if err := tx.Outbox.EmitPaymentReminder(ctx, 1, reminder(1), events.DeliverAfter(time.Hour), events.ReturnEventID(&waiting)); err != nil {
			return err
		}
		if err := tx.Outbox.EmitPaymentReminder(ctx, 2, reminder(2), events.DeliverAfter(time.Hour), events.ReturnEventID(&rolledBack)); err != nil {
			return err
		}
		return tx.Outbox.EmitPaymentReminder(ctx, 3, reminder(3), events.ReturnEventID(&sent))
	}))

	cancel := func(id uuid.UUID) (events.CancelResult, error) {
		var res events.CancelResult
		err := b.client.WithTx(ctx, func(tx *testent.Tx) error {
			var err error
			res, err = tx.Outbox.Cancel(ctx, id)
			return err
		})
		return res, err
	}
	res, err := cancel(waiting)
	require.NoError(t, err)
	require.Equal(t, events.Cancelled, res)
	res, err = cancel(waiting)
	require.NoError(t, err)
	require.Equal(t, events.AlreadyCancelled, res)
	res, err = cancel(sent)
	require.NoError(t, err)
	require.Equal(t, events.TooLate, res)
	unknown := uuid.New()
	_, err = cancel(unknown)
	require.ErrorIs(t, err, events.ErrEventNotFound)
	require.ErrorContains(t, err, unknown.String())

	// A Cancel rolled back leaves the event waiting.
	tx, err := b.client.Tx(ctx)
	require.NoError(t, err)
	res, err = tx.Outbox.Cancel(ctx, rolledBack)
	require.NoError(t, err)
	require.Equal(t, events.Cancelled, res)
	require.NoError(t, tx.Rollback())

	// Cancelled in the transaction that scheduled it (still held by the
	// batch when Cancel is called).
	var same uuid.UUID
	require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
		if err := tx.Outbox.EmitPaymentReminder(ctx, 4, reminder(4), events.DeliverAfter(time.Hour), events.ReturnEventID(&same)); err != nil {
			return err
		}
		res, err = tx.Outbox.Cancel(ctx, same)
		return err
	}))
	require.Equal(t, events.Cancelled, res)

	got := map[uuid.UUID]bool{}
	for _, r := range b.scheduled(t) {
		got[r.EventID] = r.Cancelled
	}
	require.Equal(t, map[uuid.UUID]bool{waiting: true, rolledBack: false, same: true}, got,
		"cancelled events stay, marked; the rolled back Cancel left its event waiting")
	require.Len(t, b.rows(t), 1, "Cancel moved nothing into the outbox")
}

// TestEmitScheduledTakesNoAggregateSeq: a scheduled event takes no number
// of its aggregate at Emit, so the aggregate's events after it are
// numbered on without a gap: it holds none of them back.
func TestEmitScheduledTakesNoAggregateSeq(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	paid := testent.OrderPaid{OrderID: 1, AmountCents: 5}
	require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
		return tx.Outbox.EmitOrderPaid(ctx, 1, paid)
	}))
	require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
		if err := tx.Outbox.EmitOrderPaid(ctx, 1, paid, events.DeliverAfter(time.Hour)); err != nil {
			return err
		}
		return tx.Outbox.EmitOrderPaid(ctx, 1, paid)
	}))
	require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
		return tx.Outbox.EmitOrderPaid(ctx, 1, paid)
	}))

	rs, err := b.db.DB.Query(`SELECT aggregate_seq FROM outbox_events WHERE aggregate_id = '1' ORDER BY id`)
	require.NoError(t, err)
	defer rs.Close()
	var seqs []int64
	for rs.Next() {
		var s int64
		require.NoError(t, rs.Scan(&s))
		seqs = append(seqs, s)
	}
	require.NoError(t, rs.Err())
	require.Equal(t, []int64{1, 2, 3}, seqs)
	var last int64
	require.NoError(t, b.db.DB.QueryRow(`SELECT last_seq FROM outbox_aggregate_sequences
		WHERE topic = 'orders' AND aggregate_type = 'Order' AND aggregate_id = '1'`).Scan(&last))
	require.Equal(t, int64(3), last, "the counter holds no number for the waiting event")
	require.Len(t, b.scheduled(t), 1)
}
