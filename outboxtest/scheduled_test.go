package outboxtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/outboxtest"
)

// TestRequireScheduled: the event of the type, scheduled and not
// cancelled, due at the time within the tolerance; failures say what was
// scheduled instead.
func TestRequireScheduled(t *testing.T) {
	t.Parallel()
	eachDatabase(t, requireScheduled)
}

func requireScheduled(t *testing.T, client *testent.Client) {
	ctx := context.Background()

	tx, err := client.Tx(ctx)
	require.NoError(t, err)
	defer tx.Rollback()
	var (
		reminder  = uuid.MustParse("00000000-0000-7000-8000-000000000001")
		paid      = uuid.MustParse("00000000-0000-7000-8000-000000000002")
		cancelled = uuid.MustParse("00000000-0000-7000-8000-000000000003")
		now       = uuid.MustParse("00000000-0000-7000-8000-000000000004")
	)
	at := time.Now().Add(24 * time.Hour).Truncate(time.Second).UTC()
	require.NoError(t, tx.Outbox.EmitPaymentReminder(ctx, 7, testent.PaymentReminder{OrderID: 7},
		events.DeliverAt(at), events.WithEventID(reminder)))
	require.NoError(t, tx.Outbox.EmitOrderPaid(ctx, 7, testent.OrderPaid{OrderID: 7, AmountCents: 5},
		events.DeliverAfter(time.Hour), events.WithEventID(paid)))
	require.NoError(t, tx.Outbox.EmitPaymentReminder(ctx, 8, testent.PaymentReminder{OrderID: 8},
		events.DeliverAt(at), events.WithEventID(cancelled)))
	res, err := tx.Outbox.Cancel(ctx, cancelled)
	require.NoError(t, err)
	require.Equal(t, events.Cancelled, res)
	require.NoError(t, tx.Outbox.EmitOrderPaid(ctx, 7, testent.OrderPaid{OrderID: 7, AmountCents: 5}, events.WithEventID(now)))

	rows := tx.Outbox.ScheduledX(ctx)
	require.Len(t, rows, 3)
	r := outboxtest.RequireScheduled[testent.PaymentReminder](t, rows, at, time.Second)
	require.Equal(t, testent.PaymentReminder{OrderID: 7}, r)
	// DeliverAfter: the database's clock plus the delay, near the test's.
	outboxtest.RequireScheduled[testent.OrderPaid](t, rows, time.Now().Add(time.Hour), 10*time.Second)
	outboxtest.RequireNotScheduled[testent.ProfileUpdated](t, rows)

	due := at.Format("2006-01-02T15:04:05.000000Z")
	require.Equal(t, `outboxtest: "payment.reminder" event `+reminder.String()+` is due at `+due+`, want `+
		at.Add(time.Hour).Format("2006-01-02T15:04:05.000000Z")+` give or take 1m0s (1h0m0s early)`,
		failure(t, func(tb testing.TB) {
			outboxtest.RequireScheduled[testent.PaymentReminder](tb, rows, at.Add(time.Hour), time.Minute)
		}))
	msg := failure(t, func(tb testing.TB) { outboxtest.RequireScheduled[testent.ProfileUpdated](tb, rows, at, time.Second) })
	require.Contains(t, msg, `outboxtest: no "profile.updated" event is scheduled; the rows hold "payment.reminder" (event `+
		reminder.String()+`, aggregate 7) due at `+due+`; "order.paid" (event `+paid.String()+`, aggregate 7) due at `)
	require.Contains(t, msg, `; "payment.reminder" (event `+cancelled.String()+`, aggregate 8) due at `+due+`, cancelled at `)
	require.Equal(t, `outboxtest: "payment.reminder" is scheduled (event `+reminder.String()+`, due at `+due+`), want none`,
		failure(t, func(tb testing.TB) { outboxtest.RequireNotScheduled[testent.PaymentReminder](tb, rows) }))

	// Rows of the outbox were sent at once.
	require.Equal(t, `outboxtest: no "order.paid" event is scheduled; the rows hold "order.paid" (event `+now.String()+
		`, aggregate 7) sent at once, not scheduled`,
		failure(t, func(tb testing.TB) {
			outboxtest.RequireScheduled[testent.OrderPaid](tb, tx.Outbox.EmittedX(ctx), time.Now(), time.Hour)
		}))

	// Twice.
	require.NoError(t, tx.Outbox.EmitPaymentReminder(ctx, 9, testent.PaymentReminder{OrderID: 9}, events.DeliverAfter(time.Minute)))
	require.Contains(t, failure(t, func(tb testing.TB) {
		outboxtest.RequireScheduled[testent.PaymentReminder](tb, tx.Outbox.ScheduledX(ctx), at, time.Second)
	}), `outboxtest: "payment.reminder" is scheduled 2 times, want once: the rows hold "payment.reminder" (event `+reminder.String())

	// After the commit, from a query of the scheduled events.
	require.NoError(t, tx.Commit())
	outboxtest.RequireNotScheduled[testent.AuditRecorded](t, client.ScheduledEvent.Query().AllX(ctx))
	require.Len(t, outboxtest.RequireEmittedAll[testent.PaymentReminder](t, client.ScheduledEvent.Query().AllX(ctx)), 3)
}
