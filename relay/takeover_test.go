package relay_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/relay"
)

// A relay killed with SIGKILL and started again under the same --relay-id,
// with a lease of 2 minutes: its new life takes the partitions back within
// seconds (the dead one's session, and so its liveness lock, is gone), not
// at the end of the lease; status shows the dead one as not running. The
// lease is long so that half of it is a liveness bound on a loaded machine.
func TestKilledRelayIsReplacedWithinSeconds(t *testing.T) {
	skipIfShort(t, "kills a relay process")
	t.Parallel()
	bin, err := buildCommand()
	require.NoError(t, err)
	const natsURL = "nats://127.0.0.1:4222"
	const lease = 2 * time.Minute
	b := setupEmit(t)
	direct := openBroker(t, natsURL, "NATS JetStream at 127.0.0.1:4222")
	prefix := uniquePrefix()
	got := receiveAll(t, direct, prefix+"consumer", prefix+"orders")

	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "relay", "--broker", natsURL, "--topic-prefix", prefix, "--lease", lease.String(),
			"--poll-interval", "50ms", "--relay-id", "r1", "--log-level", "error")
		cmd.Env = append(os.Environ(), "ENTOUTBOX_DATABASE_URL="+b.db.URL)
		cmd.Stderr = os.Stderr
		startDyingWithTest(t, cmd)
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	first := start()
	before := emitOrders(t, b.client, 20, 5, 0)
	got.waitFor(t, before, patience)

	require.NoError(t, first.Process.Signal(syscall.SIGKILL))
	_ = first.Wait()
	require.Eventually(t, func() bool {
		backlog, err := relay.ReadBacklog(context.Background(), b.db.DB, "", "")
		require.NoError(t, err)
		return len(backlog.Relays) == 1 && !backlog.Relays[0].Live && !backlog.Relays[0].Lapsed
	}, patience, 20*time.Millisecond, "status shows the killed relay as not running, its lease still current")

	after := emitOrders(t, b.client, 20, 5, 0)
	killed := time.Now()
	start()
	got.waitFor(t, after, lease/2)
	took := time.Since(killed)
	require.Less(t, took, lease/2, "the restarted relay waited for the lease")
	t.Logf("events committed after the kill arrived %s after the restart (lease %s)", took.Round(10*time.Millisecond), lease)
}

// gatedPublisher holds every publish until the gate opens, and counts what
// it published per aggregate; entered has a value once a publish waits.
type gatedPublisher struct {
	message.Publisher
	gate    chan struct{}
	entered chan struct{}
	mu      sync.Mutex
	sent    map[string]int
}

func (p *gatedPublisher) Publish(topic string, msgs ...*message.Message) error {
	select {
	case p.entered <- struct{}{}:
	default:
	}
	<-p.gate
	if err := p.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		p.sent[m.Metadata.Get("outbox_aggregate_id")]++
	}
	return nil
}

func (p *gatedPublisher) count(agg string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent[agg]
}

// A relay whose partitions were taken from it while it held rows of them
// (queued behind a publish in flight) forgets those rows: it sends nothing
// more of a partition it no longer owns.
func TestLostPartitionKeepsNoQueuedRows(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	pubsub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1000, Persistent: true}, watermill.NopLogger{})
	pub := &gatedPublisher{Publisher: pubsub, gate: make(chan struct{}), entered: make(chan struct{}, 1), sent: map[string]int{}}
	emitOrders(t, b.client, 10, 1, 0) // ten events of one aggregate
	r, err := relay.New(quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: pub}))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	gateOpen := false
	t.Cleanup(func() {
		if !gateOpen {
			close(pub.gate)
		}
		cancel()
		<-done
	})
	// The first is in flight (held at the gate), the other nine queued.
	select {
	case <-pub.entered:
	case <-time.After(patience):
		t.Fatal("nothing was published")
	}

	_, err = b.db.DB.Exec(`UPDATE outbox_events_partitions SET relay = 'thief/1/1', until = now() + interval '1 hour';
		SELECT pg_notify('outbox_events_rebalance', '')`)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(owners(t, b)) == 1 && owners(t, b)["thief/1/1"] > 0 },
		patience, 20*time.Millisecond)
	// The relay's next rebalance tells it, and it forgets the rows it holds.
	require.Eventually(t, func() bool { st, _ := r.Status(); return st.Partitions == 0 }, patience, 20*time.Millisecond,
		"the relay still counts partitions as its own")
	close(pub.gate)
	gateOpen = true
	time.Sleep(time.Second) // what it still sent, it sends now
	require.Equal(t, 1, pub.count("order-0"), "only the publish already in flight went out")
}

// A relay that cannot renew its leases (its rebalances block) stops sending
// two thirds into the lease, before another relay may take its partitions,
// and sends again once it renews them. Its windows are fractions of a lease
// of 9 s: on a loaded machine, a delivery may take seconds.
func TestRelayStopsSendingTwoThirdsIntoAnUnrenewedLease(t *testing.T) {
	skipIfShort(t, "waits out most of a lease")
	t.Parallel()
	b := setupEmit(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubsub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 10000, Persistent: true}, watermill.NopLogger{})
	msgs, err := pubsub.Subscribe(ctx, "orders")
	require.NoError(t, err)
	got := newReceived()
	go consume(ctx, msgs, got)
	const lease = 9 * time.Second
	runRelay(t, quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: pubsub,
		Fast: relay.FastConfig{Lease: lease}}))
	warm := emitOrders(t, b.client, 5, 5, 0)
	got.waitFor(t, warm, patience)

	// Block the relay's rebalances right after one renewed the leases.
	var until time.Time
	require.NoError(t, b.db.DB.QueryRow(`SELECT max(until) FROM outbox_events_partitions`).Scan(&until))
	require.Eventually(t, func() bool {
		var now time.Time
		require.NoError(t, b.db.DB.QueryRow(`SELECT max(until) FROM outbox_events_partitions`).Scan(&now))
		return now.After(until)
	}, patience, 5*time.Millisecond)
	renewed := time.Now()
	lock, err := b.db.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer lock.Rollback()
	_, err = lock.Exec(`LOCK TABLE outbox_events_partitions IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	// Still sending 0.4 of the lease in (the renewals due every second are
	// blocked), and until two thirds; no more at 0.77, past two thirds and
	// short of all of it.
	into := func(fraction float64) time.Time { return renewed.Add(time.Duration(fraction * float64(lease))) }
	time.Sleep(time.Until(into(0.4)))
	early := emitOrdersAs(t, b.client, "early", 3, 3, 0)
	got.waitFor(t, early, time.Until(into(0.65)))
	time.Sleep(time.Until(into(0.77)))
	late := emitOrdersAs(t, b.client, "late", 3, 3, 0)
	time.Sleep(time.Until(into(0.97)))
	got.mu.Lock()
	for id := range late.ids {
		require.Zero(t, got.count[id], "sent past two thirds of an unrenewed lease")
	}
	got.mu.Unlock()
	require.NoError(t, lock.Rollback())
	got.waitFor(t, late, patience)
}

// Behind a pooler in transaction mode (PollOnly) a relay keeps nothing in
// its session: no liveness lock, so its membership says it is taken over
// by lease only; it still delivers everything, in order, by polling.
func TestPollOnlyRelayKeepsNoSessionState(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubsub, got := receiveInProcess(t, "orders")
	runRelay(t, quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: pubsub,
		Fast: relay.FastConfig{PollOnly: true}}))
	want := emitOrders(t, b.client, 30, 3, 0)
	got.waitFor(t, want, patience)
	got.requireExactly(t, want)
	var members, withLock int
	require.NoError(t, b.db.DB.QueryRow(`SELECT count(*), count(*) FILTER (WHERE live_lock) FROM outbox_events_relays`).Scan(&members, &withLock))
	require.Equal(t, 1, members)
	require.Zero(t, withLock, "a poll-only relay claims a liveness lock")
	backlog, err := relay.ReadBacklog(ctx, b.db.DB, "", "")
	require.NoError(t, err)
	require.Len(t, backlog.Relays, 1)
	require.False(t, backlog.Relays[0].Live, "a poll-only relay holds a session lock")
}

// A relay paused (SIGSTOP) in the middle of a drain, until another takes
// its partitions when the lease ends, and then resumed: every event arrives,
// and the events published twice (by the paused one before its pause and by
// its successor) are at most --batch-size, the rows it held claimed and not
// recorded. Redis Streams, because it drops no repeat (JetStream would).
func TestPausedRelayRepublishesAtMostABatch(t *testing.T) {
	skipIfShort(t, "pauses a relay process until its lease ends")
	t.Parallel()
	bin, err := buildCommand()
	require.NoError(t, err)
	const redisURL = "redis://127.0.0.1:6379/0"
	const batch = 300
	b := setupEmit(t)
	redis := openBroker(t, redisURL, "Redis at 127.0.0.1:6379")
	prefix := uniquePrefix()
	got := receiveAll(t, redis, prefix+"consumer", prefix+"orders")

	start := func(id string) *exec.Cmd {
		cmd := exec.Command(bin, "relay", "--broker", redisURL, "--topic-prefix", prefix, "--lease", "3s",
			"--batch-size", fmt.Sprint(batch), "--poll-interval", "50ms", "--relay-id", id, "--log-level", "error")
		cmd.Env = append(os.Environ(), "ENTOUTBOX_DATABASE_URL="+b.db.URL)
		cmd.Stderr = os.Stderr
		startDyingWithTest(t, cmd)
		t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGCONT); _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	want := emitOrders(t, b.client, 6000, 200, 0)
	first := start("paused")
	require.Eventually(t, func() bool { return got.distinct() >= 1000 }, patience, time.Millisecond)
	require.NoError(t, first.Process.Signal(syscall.SIGSTOP))
	start("successor")
	got.waitFor(t, want, patience)
	require.NoError(t, first.Process.Signal(syscall.SIGCONT))
	time.Sleep(2 * time.Second) // whatever the resumed relay still sends
	waitDelivered(t, b, 0)

	got.mu.Lock()
	defer got.mu.Unlock()
	dups := 0
	for _, n := range got.count {
		dups += n - 1
	}
	t.Logf("%d events, %d published twice (bound %d)", len(want.ids), dups, batch)
	require.LessOrEqual(t, dups, batch, "republished more than a batch")
	got.mu.Unlock()
	seen := got.firstSeen()
	got.mu.Lock()
	for agg, ids := range want.perAggregate {
		require.Equal(t, ids, seen[agg], "order of aggregate %s", agg)
	}
}

// The session holding a relay's liveness lock is cut while, as after a
// network split, the server still sees the lock held (here: another
// session takes it at once). The relay stops sending, cannot take its lock
// back, and joins again under a new name; delivery goes on.
func TestRelayWhoseLivenessLockIsTakenJoinsUnderANewName(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubsub, got := receiveInProcess(t, "orders")
	runRelay(t, quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: pubsub}))
	first := emitOrders(t, b.client, 10, 2, 0)
	got.waitFor(t, first, patience)

	var holder string
	require.NoError(t, b.db.DB.QueryRow(`SELECT relay FROM outbox_events_relays`).Scan(&holder))
	key := `hashtextextended('entoutbox live outbox_events ' || $1, 0)`
	var pid int
	require.NoError(t, b.db.DB.QueryRow(`SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
		AND classid::bigint = (`+key+` >> 32) & 4294967295 AND objid::bigint = `+key+` & 4294967295`, holder).Scan(&pid))
	thief, err := b.db.DB.Conn(ctx)
	require.NoError(t, err)
	defer thief.Close()
	_, err = thief.ExecContext(ctx, `SELECT pg_terminate_backend($1)`, pid)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var got bool
		require.NoError(t, thief.QueryRowContext(ctx, `SELECT pg_try_advisory_lock(`+key+`)`, holder).Scan(&got))
		return got
	}, patience, time.Millisecond, "the relay's lock was released with its session")

	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, b.db.DB.QueryRow(`SELECT count(*) FROM outbox_events_relays WHERE relay <> $1`, holder).Scan(&n))
		return n == 1
	}, patience, 20*time.Millisecond, "the relay joined again under a new name")
	second := emitOrders(t, b.client, 10, 2, 0)
	got.waitFor(t, second, patience)
}

// A relay frozen inside a rebalance (it holds the table's ownership lock
// while paused) does not keep the others from renewing their leases:
// PostgreSQL ends its session soon (after a second idle), and the lock with
// it. The freeze is long enough that the bound, two thirds of it, leaves a
// loaded machine room.
func TestRelayFrozenInARebalanceDoesNotBlockTheOthers(t *testing.T) {
	skipIfShort(t, "freezes a relay for 10 s")
	t.Parallel()
	b := setupEmit(t)
	frozen, err := relay.NewSubscriber(b.db.DB, relay.SubscriberConfig{RelayID: "frozen", Partitions: 4})
	require.NoError(t, err)
	t.Cleanup(func() { _ = frozen.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err = frozen.Subscribe(ctx, relay.AllTopics) // creates the tables
	require.NoError(t, err)

	const frozenFor = 10 * time.Second
	inside, thaw := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- relay.InOwnerLock(ctx, frozen, func() {
			close(inside)
			select { // frozen for frozenFor, or until the other got the lock
			case <-time.After(frozenFor):
			case <-thaw:
			}
		})
	}()
	<-inside
	other, err := relay.NewSubscriber(b.db.DB, relay.SubscriberConfig{RelayID: "other", Partitions: 4})
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	started := time.Now()
	_, err = other.Subscribe(ctx, relay.AllTopics) // its first rebalance waits for the lock
	require.NoError(t, err)
	took := time.Since(started)
	// The other got the lock: the frozen one need not sleep on (its
	// session is gone, or the bound below fails).
	close(thaw)
	require.Less(t, took, frozenFor*2/3, "a frozen rebalance held the ownership lock")
	require.Error(t, <-done, "the frozen transaction was ended")
}
