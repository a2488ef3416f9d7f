package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay"
)

// natsScheduled is the broker of the scheduled events' tests.
const natsScheduled = "nats://127.0.0.1:4222"

// dbNow is the database's clock.
func dbNow(t *testing.T, db *sql.DB) time.Time {
	t.Helper()
	now, err := dbClock(db)
	require.NoError(t, err)
	return now
}

// dbClock reads the clock the relay compares deliver_at with.
func dbClock(db *sql.DB) (time.Time, error) {
	if relay.IsSQLite(db) { // its clock is this process's
		return time.Now(), nil
	}
	query := `SELECT clock_timestamp()`
	if relay.IsMySQL(db) {
		query = `SELECT UTC_TIMESTAMP(6)`
	}
	var now time.Time
	err := db.QueryRow(query).Scan(&now)
	return now, err
}

// arrival is a message as it arrived, with the database's clock then.
type arrival struct {
	id, agg   string
	seq       int64
	deliverAt time.Time // its MetaDeliverAt; zero when it has none
	at        time.Time // the database's clock when it arrived
}

// timedReceiver records what arrives on prefix+"orders" with the
// database's clock at each arrival, in arrival order, and acks it.
type timedReceiver struct {
	mu   sync.Mutex
	all  []arrival
	seen map[string]int
}

func receiveTimed(t *testing.T, b broker.Broker, db *sql.DB, prefix string) *timedReceiver {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sub, err := b.Subscriber(prefix + "consumer")
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	msgs, err := sub.Subscribe(ctx, prefix+"orders")
	require.NoError(t, err)
	r := &timedReceiver{seen: map[string]int{}}
	go func() {
		for msg := range msgs {
			r.add(t, db, msg)
			msg.Ack()
		}
	}()
	return r
}

func (r *timedReceiver) add(t *testing.T, db *sql.DB, msg *message.Message) {
	at, err := dbClock(db)
	if err != nil {
		t.Errorf("reading the database's clock: %v", err)
		return
	}
	a := arrival{id: msg.UUID, agg: msg.Metadata.Get(events.MetaAggregateID), at: at}
	a.seq, _ = strconv.ParseInt(msg.Metadata.Get(events.MetaAggregateSeq), 10, 64)
	if s := msg.Metadata.Get(events.MetaDeliverAt); s != "" {
		var err error
		if a.deliverAt, err = time.Parse(time.RFC3339Nano, s); err != nil {
			t.Errorf("event %s: %s %q: %v", msg.UUID, events.MetaDeliverAt, s, err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, a)
	r.seen[a.id]++
}

// waitFor waits until every id arrived.
func (r *timedReceiver) waitFor(t *testing.T, ids []string, timeout time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, id := range ids {
			if r.seen[id] == 0 {
				return false
			}
		}
		return true
	}, timeout, 20*time.Millisecond, "not every event arrived")
}

// first is each event's first arrival, and the first arrivals' event ids
// per aggregate in arrival order.
func (r *timedReceiver) first() (map[string]arrival, map[string][]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byID, perAgg := map[string]arrival{}, map[string][]string{}
	for _, a := range r.all {
		if _, ok := byID[a.id]; ok {
			continue
		}
		byID[a.id] = a
		perAgg[a.agg] = append(perAgg[a.agg], a.id)
	}
	return byID, perAgg
}

// emitOne commits one OrderPaid event of agg with opts and returns its id.
func emitOne(t *testing.T, client *testent.Client, agg string, opts ...events.EmitOption) string {
	t.Helper()
	ctx := context.Background()
	id := uuid.New()
	require.NoError(t, client.WithTx(ctx, func(tx *testent.Tx) error {
		return tx.Outbox.EmitOrderPaid(ctx, agg, testent.OrderPaid{OrderID: 1, AmountCents: 100},
			append([]events.EmitOption{events.WithEventID(id)}, opts...)...)
	}))
	return id.String()
}

// cancelEvent cancels id in a transaction of its own.
func cancelEvent(t *testing.T, client *testent.Client, id string) (events.CancelResult, error) {
	ctx := context.Background()
	var res events.CancelResult
	err := client.WithTx(ctx, func(tx *testent.Tx) error {
		var err error
		res, err = tx.Outbox.Cancel(ctx, uuid.MustParse(id))
		return err
	})
	return res, err
}

// requireNeverEarly checks every scheduled event of want arrived at or
// after its deliver_at by the database's clock, and within late of it
// (0: no bound), and returns the latest arrival's lateness.
func requireNeverEarly(t *testing.T, byID map[string]arrival, scheduled []string, late time.Duration) time.Duration {
	t.Helper()
	var latest time.Duration
	for _, id := range scheduled {
		a, ok := byID[id]
		require.True(t, ok, "scheduled event %s did not arrive", id)
		require.False(t, a.deliverAt.IsZero(), "scheduled event %s arrived without %s", id, events.MetaDeliverAt)
		require.False(t, a.at.Before(a.deliverAt), "scheduled event %s arrived at %s by the database's clock, before it was due at %s",
			id, a.at, a.deliverAt)
		if late > 0 {
			require.Less(t, a.at.Sub(a.deliverAt), late, "scheduled event %s arrived %s after it was due", id, a.at.Sub(a.deliverAt))
		}
		latest = max(latest, a.at.Sub(a.deliverAt))
	}
	return latest
}

// Scheduled events on every read path, to NATS JetStream: each arrives
// when due by the database's clock, never before (the path only ever sees
// it once promoted), within a generous bound on the fast and WAL paths;
// it holds back none of its aggregate's later events (one due in an hour
// sits among them); when due it takes the next number of its aggregate,
// and events due at the same time keep their commit order; the first
// arrivals of each aggregate follow the numbers; a cancelled event never
// arrives.
func TestScheduledEventsArriveWhenDue(t *testing.T) {
	t.Parallel()
	forPathsOf(t, everyDatabase, testScheduledEventsArriveWhenDue)
}

func testScheduledEventsArriveWhenDue(t *testing.T, p *onPath) {
	b := openBroker(t, natsScheduled, "NATS JetStream at 127.0.0.1:4222")
	prefix := uniquePrefix()
	got := receiveTimed(t, b, p.sql, prefix)

	due := dbNow(t, p.sql).Add(2 * time.Second)
	type aggregate struct {
		all                   []string // every event that must arrive
		now                   []string // immediate, in emit order
		atDue                 []string // due together, in commit order
		after, far, cancelled string
	}
	aggs := map[string]*aggregate{}
	var scheduled, all []string
	for i := range 3 {
		agg := fmt.Sprintf("sched-%d", i)
		a := &aggregate{}
		a.now = append(a.now, emitOne(t, p.client, agg))
		a.far = emitOne(t, p.client, agg, events.DeliverAfter(time.Hour))
		a.atDue = append(a.atDue, emitOne(t, p.client, agg, events.DeliverAt(due)))
		a.atDue = append(a.atDue, emitOne(t, p.client, agg, events.DeliverAt(due)))
		a.cancelled = emitOne(t, p.client, agg, events.DeliverAt(due))
		res, err := cancelEvent(t, p.client, a.cancelled)
		require.NoError(t, err)
		require.Equal(t, events.Cancelled, res)
		a.after = emitOne(t, p.client, agg, events.DeliverAfter(time.Second))
		a.now = append(a.now, emitOne(t, p.client, agg), emitOne(t, p.client, agg))
		a.all = slices.Concat(a.now, a.atDue, []string{a.after})
		aggs[agg] = a
		scheduled = append(scheduled, a.atDue...)
		scheduled = append(scheduled, a.after)
		all = append(all, a.all...)
	}

	stop := runRelay(t, p.config(relay.Config{Publisher: b.Publisher(), TopicPrefix: prefix}))
	got.waitFor(t, all, patience)
	waitDelivered(t, p.emitBundle, 0)
	require.NoError(t, stop())

	byID, perAgg := got.first()
	late := time.Duration(0)
	if p.path != relay.PathCompatible {
		late = 30 * time.Second // a liveness bound on a loaded machine, not a speed claim
	}
	t.Logf("latest arrival %s after its due time", requireNeverEarly(t, byID, scheduled, late))
	for name, a := range aggs {
		for _, id := range a.atDue {
			require.True(t, byID[id].deliverAt.Equal(due.Truncate(time.Microsecond)), "event %s: %s %s, want %s",
				id, events.MetaDeliverAt, byID[id].deliverAt, due)
		}
		require.NotContains(t, byID, a.cancelled, "a cancelled event arrived")
		require.NotContains(t, byID, a.far, "an event due in an hour arrived")
		// Numbers: the immediate ones 1, 2, 3 as emitted (the scheduled
		// ones had none), then the scheduled ones as they became due.
		for i, id := range a.now {
			require.EqualValues(t, i+1, byID[id].seq, "immediate event %d of %s", i, name)
		}
		require.Less(t, byID[a.atDue[0]].seq, byID[a.atDue[1]].seq, "events due together keep their commit order")
		seqs := []int64{}
		for _, id := range perAgg[name] {
			seqs = append(seqs, byID[id].seq)
		}
		require.Equal(t, []int64{1, 2, 3, 4, 5, 6}, seqs, "aggregate %s: first arrivals in its order, numbered densely", name)
		require.ElementsMatch(t, a.all, perAgg[name])
	}
	var pending, cancelled int
	require.NoError(t, p.sql.QueryRow(`SELECT coalesce(sum(CASE WHEN cancelled_at IS NULL THEN 1 ELSE 0 END), 0),
		coalesce(sum(CASE WHEN cancelled_at IS NOT NULL THEN 1 ELSE 0 END), 0) FROM outbox_scheduled_events`).Scan(&pending, &cancelled))
	require.Equal(t, 3, pending, "the events due in an hour wait")
	require.Equal(t, 3, cancelled, "the cancelled events stay, to be seen")
}
