package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/admin"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay"
)

// loggedRelay is a quick fast relay on b keeping the delivered log.
func loggedRelay(b *emitBundle, pub relay.Config) relay.Config {
	pub.DB = b.db.DB
	pub.Fast.DeliveredLog = true
	return quick(relay.PathFast, pub)
}

// floor reads the delivered log's floor, and how many ids the log holds.
func floor(t *testing.T, b *emitBundle) (upto, logged int64) {
	t.Helper()
	require.NoError(t, b.db.DB.QueryRow(`SELECT (SELECT upto FROM outbox_events_delivered_to),
		(SELECT count(*) FROM outbox_events_delivered)`).Scan(&upto, &logged))
	return upto, logged
}

// waitFloorOverCommitted waits until the floor is at or above the last
// row committed now.
func waitFloorOverCommitted(t *testing.T, b *emitBundle, msg string) {
	t.Helper()
	var last int64
	require.NoError(t, b.db.DB.QueryRow(`SELECT max(id) FROM outbox_events`).Scan(&last))
	require.Eventually(t, func() bool {
		upto, _ := floor(t, b)
		return upto >= last
	}, patience, 50*time.Millisecond, msg)
}

// The floor moves over a transaction still open (its row id taken, its
// row unseen): the row stays pending under the floor, and is delivered
// once it commits, by a relay started after the floor moved (which reads
// from the floor, and below it the transactions its snapshot saw in
// progress), even when its first publish fails after the floor could have
// moved again. Nothing delivered before is delivered again by that relay;
// no row is ever rewritten; the log ends empty under the floor.
func TestDeliveredLogFloorLeavesALateTransactionPending(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	pubsub, got := receiveInProcess(t, "orders")
	stop := runRelay(t, loggedRelay(b, relay.Config{Publisher: pubsub}))

	late, err := b.client.Tx(ctx)
	require.NoError(t, err)
	defer late.Rollback()
	lateID := uuid.New()
	require.NoError(t, late.Outbox.EmitOrderPaid(ctx, "late", testent.OrderPaid{OrderID: 1, AmountCents: 1},
		events.WithEventID(lateID))) // written now: its row id is taken, below the next ones

	want := emitOrdersAs(t, b.client, "early", 40, 5, 0)
	got.waitFor(t, want, patience)
	waitFloorOverCommitted(t, b, "the floor never moved over the open transaction's row")
	require.NoError(t, stop())

	require.NoError(t, late.Commit())
	want.ids[lateID.String()] = true
	want.perAggregate["late"] = []string{lateID.String()}
	// Its first publish fails, after the floor had time to move (were it
	// to move over a pending row): the row is pending until its retry.
	flaky := &flakyPublisher{Publisher: pubsub, event: lateID.String(), failures: 1, onTry: func(try int) {
		if try == 1 {
			time.Sleep(5 * time.Second)
		}
	}}
	stop = runRelay(t, loggedRelay(b, relay.Config{Publisher: flaky}))
	got.waitFor(t, want, patience)
	waitDelivered(t, b, 0)

	var maxID int64
	require.NoError(t, b.db.DB.QueryRow(`SELECT max(id) FROM outbox_events`).Scan(&maxID))
	require.Eventually(t, func() bool {
		upto, logged := floor(t, b)
		return upto == maxID && logged == 0
	}, patience, 50*time.Millisecond, "the floor never reached the last row, or the log kept entries under it")
	// The late row failed once (its last_error stays): delivered, it is
	// not failing.
	st, err := admin.ReadStatus(ctx, b.db.DB, "", "")
	require.NoError(t, err)
	require.Zero(t, st.Pending)
	require.NotEmpty(t, st.Relays)
	for _, r := range st.Relays {
		require.Zero(t, r.Failing, "a delivered row counted as failing: %+v", r)
	}
	require.NoError(t, stop())
	got.requireExactly(t, want)
	var stamped int64
	require.NoError(t, b.db.DB.QueryRow(`SELECT count(*) FROM outbox_events WHERE delivered_at IS NOT NULL`).Scan(&stamped))
	require.Zero(t, stamped, "a row was rewritten to mark it delivered")
}

// An outbox stamped by relays before goes on with the log, and back:
//   - a relay with the log on an outbox stamped so far delivers what is
//     pending and nothing stamped again;
//   - a relay without the flag on an outbox with a log keeps the log, and
//     delivers nothing the log delivered again;
//   - cleanup deletes the rows delivered either way once old, never a
//     pending one.
func TestDeliveredLogUpgradesAnOutboxWithoutLosingOrDoubling(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	pubsub, got := receiveInProcess(t, "orders")
	want := emitOrdersAs(t, b.client, "stamped", 50, 5, 7)
	stop := runRelay(t, quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: pubsub}))
	got.waitFor(t, want, patience)
	waitDelivered(t, b, 0)
	require.NoError(t, stop())
	want.add(emitOrdersAs(t, b.client, "pending", 30, 5, 0))

	stop = runRelay(t, loggedRelay(b, relay.Config{Publisher: pubsub}))
	got.waitFor(t, want, patience)
	waitDelivered(t, b, 0)
	require.NoError(t, stop())
	got.requireExactly(t, want)

	want.add(emitOrdersAs(t, b.client, "adopted", 20, 4, 0))
	stop = runRelay(t, quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: pubsub})) // no flag
	got.waitFor(t, want, patience)
	waitDelivered(t, b, 0)
	require.NoError(t, stop())
	got.requireExactly(t, want)
	var stamped, rows int64
	require.NoError(t, b.db.DB.QueryRow(`SELECT count(*) FILTER (WHERE delivered_at IS NOT NULL), count(*) FROM outbox_events`).
		Scan(&stamped, &rows))
	require.EqualValues(t, 43, stamped, "the stamping relay's rows, and no more: the log's stay as written")
	require.EqualValues(t, 93, rows)

	emitOrdersAs(t, b.client, "kept", 5, 5, 0) // pending: no relay runs
	deleted, err := relay.CleanupDelivered(context.Background(), b.db.DB, "", 0, 10)
	require.NoError(t, err)
	require.EqualValues(t, 93, deleted, "every row delivered, stamped or logged")
	require.NoError(t, b.db.DB.QueryRow(`SELECT count(*) FROM outbox_events`).Scan(&rows))
	require.EqualValues(t, 5, rows, "the pending rows stay")
}

// Cleanup deletes the rows the log delivered once old, and never a
// pending one, above or under the floor.
func TestDeliveredLogCleanupKeepsPendingRows(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	pubsub, got := receiveInProcess(t, "orders")
	want := emitOrdersAs(t, b.client, "old", 30, 3, 0)
	stop := runRelay(t, loggedRelay(b, relay.Config{Publisher: pubsub}))
	got.waitFor(t, want, patience)
	waitDelivered(t, b, 0)
	waitFloorOverCommitted(t, b, "the floor never reached the delivered rows")
	require.NoError(t, stop())

	emitOrdersAs(t, b.client, "waiting", 7, 3, 0) // no relay runs: pending
	deleted, err := relay.CleanupDelivered(ctx, b.db.DB, "", 0, 4)
	require.NoError(t, err)
	require.EqualValues(t, 30, deleted)
	var left int64
	require.NoError(t, b.db.DB.QueryRow(`SELECT count(*) FROM outbox_events WHERE aggregate_id LIKE 'waiting-%'`).Scan(&left))
	require.EqualValues(t, 7, left, "a pending row was deleted")
}
