package relay_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgschema"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/promtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/metrics"
	"github.com/entoutbox/entoutbox/relay"
)

// walSetup is a test's own outbox schema with a slot and a publication
// of its own, dropped when the test ends.
type walSetup struct {
	*emitBundle
	slot, publication string
}

// setupWAL skips (fails under CI=true) when the server cannot do logical
// replication.
func setupWAL(t *testing.T) *walSetup {
	t.Helper()
	b := setupEmit(t)
	pgtest.RequireLogical(t, b.db.DB)
	name := "t" + uuid.NewString()[:8] + "_wal"
	s := &walSetup{emitBundle: b, slot: name, publication: name}
	t.Cleanup(func() { pgtest.DropWAL(t, b.db.DB, s.slot, s.publication) })
	return s
}

// config is a quick WAL relay of s's slot.
func (s *walSetup) config(cfg relay.Config) relay.Config {
	cfg.DB, cfg.Path = s.db.DB, relay.PathWAL
	cfg.WAL.Slot, cfg.WAL.Publication = s.slot, s.publication
	if cfg.RetryInterval == 0 { // a test's own wins
		cfg.RetryInterval = 50 * time.Millisecond
	}
	cfg.WAL.StatusInterval = 200 * time.Millisecond
	cfg.WAL.StandbyRetry = 200 * time.Millisecond
	cfg.WAL.ProgressInterval = 200 * time.Millisecond
	return cfg
}

// createSlot has a relay create s's slot, and stops it: what commits from
// then on is the slot's to deliver, once a relay streams it.
func (s *walSetup) createSlot(t *testing.T) {
	t.Helper()
	stop := runRelay(t, s.config(relay.Config{Publisher: gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})}))
	waitStreaming(t, s)
	require.NoError(t, stop())
}

// A relay stopped as it creates its slot creates it and records where it
// starts before it stops: a slot left without its start would never have
// a row counted as delivered (the backlog would keep them pending, and
// cleanup keep them).
func TestWALRelayStoppedAsItCreatesItsSlotRecordsItsStart(t *testing.T) {
	t.Parallel()
	s := setupWAL(t)
	r, err := relay.New(s.config(relay.Config{Publisher: gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})}))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	relay.OnSlotCreating(r, cancel)
	require.NoError(t, r.Run(ctx))
	var created sql.NullString
	require.NoError(t, s.db.DB.QueryRow(`SELECT created::text FROM outbox_events_wal_progress WHERE slot = $1`, s.slot).Scan(&created))
	require.True(t, created.Valid, "the slot's start is not recorded")

	pubsub, got := receiveInProcess(t, "orders")
	want := emitOrders(t, s.client, 10, 3, 0)
	stop := runRelay(t, s.config(relay.Config{Publisher: pubsub}))
	got.waitFor(t, want, patience)
	waitDelivered(t, s.emitBundle, 0)
	require.NoError(t, stop())
}

// slotPosition is the slot's confirmed position, and whether a session
// streams it.
func (s *walSetup) slotPosition(t *testing.T) (string, bool) {
	t.Helper()
	var lsn sql.NullString
	var active bool
	require.NoError(t, s.db.DB.QueryRow(`SELECT confirmed_flush_lsn::text, active FROM pg_replication_slots WHERE slot_name = $1`,
		s.slot).Scan(&lsn, &active))
	return lsn.String, active
}

// Transactions committed in another order than they wrote arrive in commit
// order, within one aggregate too: the later writer that commits first is
// delivered first. Rolled-back transactions deliver nothing.
func TestWALDeliversInCommitOrder(t *testing.T) {
	t.Parallel()
	s := setupWAL(t)
	pubsub, got := receiveInProcess(t, "orders")
	arrived := arrivalOrder(t, pubsub, "orders")
	stop := runRelay(t, s.config(relay.Config{Publisher: pubsub, Concurrency: 1}))
	waitStreaming(t, s)

	ctx := context.Background()
	want := emitted{ids: map[string]bool{}, rolledBack: map[string]bool{}, perAggregate: map[string][]string{}}
	var order []string // commit order
	for i := range 10 {
		agg := fmt.Sprintf("order-%d", i%3)
		early, err := s.client.Tx(ctx)
		require.NoError(t, err)
		earlyID := emitIn(t, early, agg, 2*i)
		late, err := s.client.Tx(ctx)
		require.NoError(t, err)
		lateID := emitIn(t, late, agg, 2*i+1)
		rolled, err := s.client.Tx(ctx)
		require.NoError(t, err)
		rolledID := emitIn(t, rolled, agg, 1000+i)
		require.NoError(t, late.Commit()) // emitted second, committed first
		require.NoError(t, rolled.Rollback())
		require.NoError(t, early.Commit())
		order = append(order, lateID, earlyID)
		want.ids[lateID], want.ids[earlyID], want.rolledBack[rolledID] = true, true, true
		want.perAggregate[agg] = append(want.perAggregate[agg], lateID, earlyID)
	}
	got.waitFor(t, want, patience)
	require.NoError(t, stop())
	got.requireExactly(t, want)
	got.requireRowIDs(t, s.db.DB)
	require.Equal(t, order, arrived(), "one publish at a time: the broker sees the commit order")
}

// arrivalOrder subscribes to topic and returns the ids received so far, in
// the order they came.
func arrivalOrder(t *testing.T, pubsub message.Subscriber, topic string) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	msgs, err := pubsub.Subscribe(ctx, topic)
	require.NoError(t, err)
	var mu sync.Mutex
	var ids []string
	go func() {
		for msg := range msgs {
			mu.Lock()
			ids = append(ids, msg.UUID)
			mu.Unlock()
			msg.Ack()
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), ids...)
	}
}

// emitIn emits an event in tx, written when tx commits (an id given to
// Emit would write it at once, and the aggregate's next writer would wait
// for tx: Emit numbers an aggregate's events in commit order).
func emitIn(t *testing.T, tx *testent.Tx, agg string, n int) string {
	t.Helper()
	var id uuid.UUID
	require.NoError(t, tx.Outbox.EmitOrderPaid(context.Background(), agg, testent.OrderPaid{OrderID: int64(n), AmountCents: 100},
		events.ReturnEventID(&id)))
	return id.String()
}

// Many writers commit interleaved transactions of many aggregates while
// the relay publishes many at a time: every committed event once, none
// rolled back, each aggregate in its commit order.
func TestWALPerAggregateOrderUnderConcurrentWriters(t *testing.T) {
	t.Parallel()
	s := setupWAL(t)
	pubsub, got := receiveInProcess(t, "orders")
	// Publishes that take varying time: without one per aggregate at a
	// time, they would overtake each other. The first relay makes the
	// slot; the second finds a backlog.
	cfg := s.config(relay.Config{Publisher: jitterPublisher{pubsub}})
	first := runRelay(t, cfg)
	waitStreaming(t, s)
	require.NoError(t, first())

	var (
		mu   sync.Mutex
		want = emitted{ids: map[string]bool{}, rolledBack: map[string]bool{}, perAggregate: map[string][]string{}}
		wg   sync.WaitGroup
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := emitOrdersAs(t, s.client, fmt.Sprintf("w%d", w), 100, 7, 5)
			mu.Lock()
			defer mu.Unlock()
			want.add(e)
		}()
	}
	wg.Wait()
	stop := runRelay(t, cfg)
	got.waitFor(t, want, patience)
	require.NoError(t, stop())
	time.Sleep(100 * time.Millisecond)
	got.requireExactly(t, want)
}

// waitStreaming waits until a relay streams s's slot. While a slot is
// being created it shows active but has no position yet: what commits then
// is before its start and never streamed.
func waitStreaming(t *testing.T, s *walSetup) {
	t.Helper()
	require.Eventually(t, func() bool {
		var active bool
		err := s.db.DB.QueryRow(`SELECT active AND confirmed_flush_lsn IS NOT NULL FROM pg_replication_slots
			WHERE slot_name = $1`, s.slot).Scan(&active)
		if errors.Is(err, sql.ErrNoRows) {
			return false
		}
		require.NoError(t, err)
		return active
	}, patience, 20*time.Millisecond, "no relay streams slot %s", s.slot)
}

// firstSeenOf is the ids of agg in the order they first arrived; got.mu is
// held.
func firstSeenOf(got *received, agg string) []string {
	seen := map[string]bool{}
	var out []string
	for _, id := range got.perAggregate[agg] {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// Two relays on one slot: one streams, the other waits as a standby and
// takes over within seconds when the first is killed.
func TestWALStandbyTakesOver(t *testing.T) {
	skipIfShort(t, "kills a relay process")
	t.Parallel()
	bin, err := buildCommand()
	require.NoError(t, err)
	const brokerURL = "redis://127.0.0.1:6379/0"
	s := setupWAL(t)
	direct := openBroker(t, brokerURL, "Redis at 127.0.0.1:6379")
	prefix := uniquePrefix()
	got := receiveOn(t, direct, prefix)

	start := func() (*exec.Cmd, *lockedBuffer) {
		cmd := exec.Command(bin, "relay", "--path", "wal", "--slot", s.slot, "--publication", s.publication,
			"--broker", brokerURL, "--topic-prefix", prefix, "--log-level", "info")
		cmd.Env = append(os.Environ(), "ENTOUTBOX_DATABASE_URL="+s.db.URL)
		logs := &lockedBuffer{}
		cmd.Stderr = logs
		startDyingWithTest(t, cmd)
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd, logs
	}
	logged := func(logs *lockedBuffer, what string) {
		t.Helper()
		require.Eventually(t, func() bool { return strings.Contains(logs.String(), what) }, patience,
			10*time.Millisecond, "relay logs:\n%s", logs.String())
	}
	active, activeLogs := start()
	logged(activeLogs, "Streaming the replication slot")
	standby, standbyLogs := start()
	logged(standbyLogs, "waiting as a standby")

	before := emitOrders(t, s.client, 40, 5, 0)
	got.waitFor(t, before, patience)
	require.NoError(t, active.Process.Signal(syscall.SIGKILL))
	_ = active.Wait()
	killed := time.Now()
	after := emitOrdersAs(t, s.client, "after", 40, 5, 0)
	logged(standbyLogs, "Streaming the replication slot")
	got.waitFor(t, after, patience)
	t.Logf("the standby delivered %d events %s after the kill", len(after.ids), time.Since(killed).Round(time.Millisecond))
	require.NoError(t, standby.Process.Signal(syscall.SIGTERM))
	require.NoError(t, standby.Wait(), "relay logs:\n%s", standbyLogs.String())
}

// Status and the metrics show the slot: active while a relay streams it,
// and once none does, inactive with the WAL it retains growing. Rows the
// relay delivered are not counted as pending (their delivered_at stays
// NULL); those committed while no relay runs are.
func TestWALSlotLagInStatus(t *testing.T) {
	t.Parallel()
	s := setupWAL(t)
	pubsub, got := receiveInProcess(t, "orders")
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	require.NoError(t, m.WatchBacklog(s.db.DB, metrics.BacklogConfig{MinInterval: time.Millisecond}))
	stop := runRelay(t, s.config(relay.Config{Publisher: pubsub}))
	waitStreaming(t, s)
	want := emitOrders(t, s.client, 30, 3, 0)
	got.waitFor(t, want, patience)
	require.Eventually(t, func() bool {
		b, err := relay.ReadBacklog(context.Background(), s.db.DB, "", "")
		require.NoError(t, err)
		return b.Pending == 0
	}, patience, 20*time.Millisecond, "delivered rows still counted as pending")
	b, err := relay.ReadBacklog(context.Background(), s.db.DB, "", "")
	require.NoError(t, err)
	require.Len(t, b.WAL, 1)
	require.Equal(t, s.slot, b.WAL[0].Slot)
	require.True(t, b.WAL[0].Exists)
	require.True(t, b.WAL[0].Active, "a relay streams the slot")
	require.Equal(t, 1.0, promtest.Value(t, reg, "entoutbox_wal_slot_active", "slot", s.slot))
	require.Zero(t, promtest.Value(t, reg, "entoutbox_outbox_pending_events", "topic", "orders"))

	require.NoError(t, stop())
	waiting := emitOrdersAs(t, s.client, "waiting", 20, 3, 0)
	require.Eventually(t, func() bool {
		b, err = relay.ReadBacklog(context.Background(), s.db.DB, "", "")
		require.NoError(t, err)
		return !b.WAL[0].Active
	}, patience, 20*time.Millisecond)
	require.Equal(t, int64(len(waiting.ids)), b.Pending, "what no relay delivered is pending")
	require.Positive(t, b.WAL[0].RetainedBytes, "the server keeps the WAL since the slot's position")
	require.Positive(t, b.WAL[0].LagBytes, "the confirmed position is behind")
	require.Zero(t, promtest.Value(t, reg, "entoutbox_wal_slot_active", "slot", s.slot))
	require.Positive(t, promtest.Value(t, reg, "entoutbox_wal_slot_retained_bytes", "slot", s.slot))
	require.Equal(t, float64(len(waiting.ids)), promtest.Value(t, reg, "entoutbox_outbox_pending_events", "topic", "orders"))
}

// Cleanup deletes the old rows the WAL path delivered, in bulk, and keeps
// the recent ones, those no relay delivered, and those written before the
// slot's start, which the relay sent itself and marked delivered just now.
func TestWALCleanupDeletesDeliveredKeepsUndelivered(t *testing.T) {
	t.Parallel()
	s := setupWAL(t)
	ctx := context.Background()
	before := emitOrdersAs(t, s.client, "before", 5, 2, 0) // before the slot: not in the stream
	pubsub, got := receiveInProcess(t, "orders")
	stop := runRelay(t, s.config(relay.Config{Publisher: pubsub}))
	waitStreaming(t, s)
	delivered := emitOrders(t, s.client, 20, 3, 0)
	got.waitFor(t, delivered, patience)
	got.waitFor(t, before, patience)
	require.Eventually(t, func() bool {
		b, err := relay.ReadBacklog(ctx, s.db.DB, "", "")
		require.NoError(t, err)
		return b.Pending == 0
	}, patience, 20*time.Millisecond, "the delivered rows are not recorded as delivered")
	require.NoError(t, stop())
	undelivered := emitOrdersAs(t, s.client, "later", 7, 2, 0)

	// All written "long ago"; 5 of the delivered ones just now.
	_, err := s.db.DB.Exec(`UPDATE outbox_events SET created_at = now() - interval '30 days'`)
	require.NoError(t, err)
	_, err = s.db.DB.Exec(`UPDATE outbox_events SET created_at = now() WHERE id IN (
		SELECT id FROM outbox_events WHERE aggregate_id LIKE 'order-%' ORDER BY id DESC LIMIT 5)`)
	require.NoError(t, err)
	n, err := relay.CleanupDelivered(ctx, s.db.DB, "", 7*24*time.Hour, 4)
	require.NoError(t, err)
	require.Equal(t, int64(len(delivered.ids)-5), n, "old rows the WAL path delivered")
	left := map[string]bool{}
	rows, err := s.db.DB.Query(`SELECT event_id FROM outbox_events`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		left[id] = true
	}
	require.NoError(t, rows.Err())
	for id := range before.ids {
		require.True(t, left[id], "a row written before the slot's start, delivered just now, was deleted")
	}
	for id := range undelivered.ids {
		require.True(t, left[id], "an undelivered row was deleted")
	}
	require.Len(t, left, len(before.ids)+len(undelivered.ids)+5)
	b, err := relay.ReadBacklog(ctx, s.db.DB, "", "")
	require.NoError(t, err)
	require.Equal(t, int64(len(undelivered.ids)), b.Pending)
}

// PostgreSQL stops cleanly, then crashes, while the relay streams: the relay
// reconnects by itself and resumes at the slot's position; nothing
// committed is lost, and first arrivals keep each aggregate's order. (The
// server resumes from the position it last saved for the slot: PostgreSQL
// 15 saves it when the slot's restart point moves, so here, on an idle
// server, everything since the slot's start comes again.)
func TestWALSurvivesPostgresRestart(t *testing.T) {
	skipIfShort(t, "restarts PostgreSQL")
	t.Parallel()
	pg := pgtest.StartPrivate(t)
	db := pg.Open(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db)))
	pgtest.Migrate(t, client.Schema.Create)
	s := &walSetup{emitBundle: &emitBundle{db: &pgtest.DB{URL: pg.URL, DB: db}, client: client},
		slot: "outbox_events_wal", publication: "outbox_events_wal"}
	pubsub, got := receiveInProcess(t, "orders")
	stop := runRelay(t, s.config(relay.Config{Publisher: pubsub}))
	waitStreaming(t, s)

	want := emitOrders(t, client, 30, 3, 4)
	got.waitFor(t, want, patience)
	for i, mode := range []string{"fast", "immediate"} {
		pg.Stop(t, mode)
		time.Sleep(300 * time.Millisecond) // the relay finds the server gone
		pg.Start(t)
		require.Eventually(t, func() bool { return db.Ping() == nil }, patience, 50*time.Millisecond)
		more := emitOrdersAs(t, client, fmt.Sprintf("after-%s", mode), 30, 3, 4)
		got.waitFor(t, more, patience)
		for id := range more.ids {
			want.ids[id] = true
		}
		for id := range more.rolledBack {
			want.rolledBack[id] = true
		}
		for agg, ids := range more.perAggregate {
			want.perAggregate[agg] = ids
		}
		t.Logf("restart %d (%s): %d events so far, %d received", i+1, mode, len(want.ids), got.distinct())
	}
	require.NoError(t, stop())
	got.mu.Lock()
	defer got.mu.Unlock()
	dups := 0
	for id, n := range got.count {
		require.False(t, want.rolledBack[id], "event %s of a rolled-back transaction was delivered", id)
		require.True(t, want.ids[id], "unknown event %s", id)
		dups += n - 1
	}
	for agg, ids := range want.perAggregate {
		require.Equal(t, ids, firstSeenOf(got, agg), "first arrivals of aggregate %s in commit order", agg)
	}
	t.Logf("%d events, %d duplicates", len(want.ids), dups)
}

// jitterPublisher publishes after a random pause of up to 2 ms.
type jitterPublisher struct{ message.Publisher }

func (p jitterPublisher) Publish(topic string, msgs ...*message.Message) error {
	time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
	return p.Publisher.Publish(topic, msgs...)
}

// New refuses WAL settings that cannot work, naming the field.
func TestWALConfigRefusedNamingTheField(t *testing.T) {
	t.Parallel()
	db, err := pgschema.Open(pgtest.ServerURL())
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	pub := gochannel.NewGoChannel(gochannel.Config{}, nil)
	for _, tc := range []struct {
		cfg  relay.Config
		want string
	}{
		{relay.Config{WAL: relay.WALConfig{Slot: "Orders-WAL"}},
			`relay: Config.WAL.Slot is "Orders-WAL": a replication slot name is 1 to 63 lower-case letters, digits and underscores (the default is the table's name with _wal)`},
		{relay.Config{Table: "Outbox"},
			`relay: Config.WAL.Slot is "Outbox_wal": a replication slot name is 1 to 63 lower-case letters, digits and underscores (the default is the table's name with _wal)`},
		{relay.Config{WAL: relay.WALConfig{Publication: "a b"}},
			`relay: Config.WAL.Publication is "a b": want 1 to 63 lower-case letters, digits and underscores`},
		{relay.Config{WAL: relay.WALConfig{StatusInterval: -time.Second}}, `relay: Config.WAL.StatusInterval must not be negative, not -1s`},
	} {
		tc.cfg.DB, tc.cfg.Publisher, tc.cfg.Path = db, pub, relay.PathWAL
		_, err := relay.New(tc.cfg)
		require.EqualError(t, err, tc.want)
	}
}

// A transaction of more rows than the window is read through, the window's
// worth at a time; the transactions around it are delivered too, once.
func TestWALTransactionLargerThanTheWindow(t *testing.T) {
	t.Parallel()
	s := setupWAL(t)
	pubsub, got := receiveInProcess(t, "orders")
	stop := runRelay(t, s.config(relay.Config{Publisher: pubsub, BatchSize: 50}))
	waitStreaming(t, s)
	before := emitOrdersAs(t, s.client, "before", 10, 2, 0)
	_, err := s.db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id,
		payload, headers) SELECT gen_random_uuid(), 'order.paid', 1, 'orders', 'Order', 'big-' || (g % 7), '{}', '{}'
		FROM generate_series(1, 1500) g`)
	require.NoError(t, err)
	after := emitOrdersAs(t, s.client, "after", 10, 2, 0)
	got.waitFor(t, after, patience)
	got.waitFor(t, before, time.Second)
	require.Eventually(t, func() bool { return got.distinct() == 1520 }, patience, 20*time.Millisecond,
		"got %d of 1520", got.distinct())
	require.NoError(t, stop())
	got.mu.Lock()
	defer got.mu.Unlock()
	for id, n := range got.count {
		require.Equal(t, 1, n, "event %s delivered %d times", id, n)
	}
}
