package relay_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay"
)

// The fast path's fencing: a subscription sends nothing once it cannot be
// sure its partitions are still its own. The database stalls and failures
// it guards against are made with the Subscriber's test hooks (OnRenew,
// OnLivenessCheck), which block or fail a renewal or a liveness check
// exactly when the test says.

// emitInOneTx commits n OrderPaid events over the given number of
// aggregates in one transaction.
func emitInOneTx(t *testing.T, client *testent.Client, prefix string, n, aggregates int) emitted {
	t.Helper()
	ctx := context.Background()
	e := emitted{ids: map[string]bool{}, rolledBack: map[string]bool{}, perAggregate: map[string][]string{}}
	require.NoError(t, client.WithTx(ctx, func(tx *testent.Tx) error {
		for i := range n {
			agg := fmt.Sprintf("%s-%d", prefix, i%aggregates)
			id := uuid.NewString()
			if err := tx.Outbox.EmitOrderPaid(ctx, agg, testent.OrderPaid{OrderID: int64(i), AmountCents: 100},
				events.WithEventID(uuid.MustParse(id))); err != nil {
				return err
			}
			e.ids[id] = true
			e.perAggregate[agg] = append(e.perAggregate[agg], id)
		}
		return nil
	}))
	return e
}

// pacedConsumer takes the messages of a subscription one at a time, acking
// each after pace while paced, and notes when each arrived.
type pacedConsumer struct {
	*received
	paced atomic.Bool
	mu    sync.Mutex
	times []time.Time
}

func consumePaced(t *testing.T, msgs <-chan *message.Message, pace time.Duration) *pacedConsumer {
	c := &pacedConsumer{received: newReceived()}
	c.paced.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case msg, ok := <-msgs:
				if !ok {
					return
				}
				c.mu.Lock()
				c.times = append(c.times, time.Now())
				c.mu.Unlock()
				c.add(msg)
				if c.paced.Load() {
					time.Sleep(pace)
				}
				msg.Ack()
			}
		}
	}()
	return c
}

// arrivedAfter is how many messages arrived after at.
func (c *pacedConsumer) arrivedAfter(at time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, tm := range c.times {
		if tm.After(at) {
			n++
		}
	}
	return n
}

// stall is a hook that, once armed, blocks every call until released
// (whatever its context says, as a connection stuck in the network would),
// and tells when the last call let through and the first blocked one came.
type stall struct {
	armed    atomic.Bool
	passed   atomic.Int64 // unix nanoseconds
	entered  chan struct{}
	enter    sync.Once
	released chan struct{}
	release  sync.Once
}

func newStall() *stall {
	return &stall{entered: make(chan struct{}), released: make(chan struct{})}
}

func (s *stall) hook(context.Context) error {
	if !s.armed.Load() {
		s.passed.Store(time.Now().UnixNano())
		return nil
	}
	s.enter.Do(func() { close(s.entered) })
	<-s.released
	return nil
}

// arm blocks the calls from now on, once one was let through (the fence
// is reckoned from it).
func (s *stall) arm(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool { return s.passed.Load() != 0 }, patience, time.Millisecond,
		"no call came through the hook")
	s.armed.Store(true)
}

func (s *stall) open() { s.armed.Store(false); s.release.Do(func() { close(s.released) }) }

// waitEntered waits until a stalled call came, and returns when the last
// call before it was let through.
func (s *stall) waitEntered(t *testing.T) time.Time {
	t.Helper()
	select {
	case <-s.entered:
		return time.Unix(0, s.passed.Load())
	case <-time.After(patience):
		t.Fatal("the stalled call never came")
		return time.Time{}
	}
}

// fencedSubscriber starts a Subscriber on b's table with the given lease,
// whose hooks set sets before it subscribes, and a paced consumer of it.
func fencedSubscriber(t *testing.T, b *emitBundle, lease time.Duration, set func(*relay.Subscriber)) (*relay.Subscriber, *pacedConsumer) {
	t.Helper()
	sub, err := relay.NewSubscriber(b.db.DB, relay.SubscriberConfig{Partitions: 4, Lease: lease,
		PollInterval: 20 * time.Millisecond, InitialBackoff: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	set(sub)
	msgs, err := sub.Subscribe(context.Background(), relay.AllTopics)
	require.NoError(t, err)
	return sub, consumePaced(t, msgs, 20*time.Millisecond)
}

// requireSilentAfter asserts that nothing arrived after fence (plus a
// margin for a message already on its way) during the next few seconds,
// while rows remain to be sent: the subscription stopped, not its supply.
func requireSilentAfter(t *testing.T, got *pacedConsumer, want emitted, fence time.Time, why string) {
	t.Helper()
	checkFrom := fence.Add(time.Second)
	time.Sleep(time.Until(checkFrom.Add(3 * time.Second)))
	late := got.arrivedAfter(checkFrom)
	require.Zero(t, late, "%d events sent more than a second after %s", late, why)
	require.Less(t, got.distinct(), len(want.ids), "every event was sent before the fence: the test proves nothing")
}

// A subscription whose renewal of its leases hangs sends nothing once its
// leases are two thirds of Lease old, before they could have run out and
// another relay taken its partitions; it delivers everything once the
// database answers again.
func TestSubscriberSendsNothingTwoThirdsIntoAHungRenewal(t *testing.T) {
	skipIfShort(t, "waits out two thirds of a 9 s lease")
	t.Parallel()
	b := setupEmit(t)
	want := emitInOneTx(t, b.client, "hung", 1000, 50)
	// Long enough that a fence at three quarters of it or later is told
	// from one at two thirds, past the margin requireSilentAfter allows.
	const lease = 9 * time.Second
	renewals := newStall()
	_, got := fencedSubscriber(t, b, lease, func(s *relay.Subscriber) { relay.OnRenew(s, renewals.hook) })
	t.Cleanup(renewals.open) // before Close, which waits for the renewal

	require.Eventually(t, func() bool { return got.distinct() >= 20 }, patience, 10*time.Millisecond,
		"the subscription sent nothing")
	renewals.arm(t)
	// The leases were last renewed by the renewal let through before (or
	// earlier, if it failed): they run from when it began.
	fence := renewals.waitEntered(t).Add(lease * 2 / 3)
	requireSilentAfter(t, got, want, fence, "two thirds of a lease whose renewal hangs")

	renewals.open()
	got.paced.Store(false)
	got.waitFor(t, want, patience)
	got.requireExactly(t, want)
}

// A subscription that cannot confirm its liveness lock (the session
// holding it is gone and the check of it hangs) sends nothing once its
// last confirmation is LiveStale old: the others take its partitions when
// they see the lock free. It delivers everything once it holds a lock
// again.
func TestSubscriberSendsNothingWithoutItsLivenessLock(t *testing.T) {
	skipIfShort(t, "stalls a liveness check until the fence")
	t.Parallel()
	b := setupEmit(t)
	want := emitInOneTx(t, b.client, "unlocked", 1000, 50)
	checks := newStall()
	_, got := fencedSubscriber(t, b, 30*time.Second, func(s *relay.Subscriber) { relay.OnLivenessCheck(s, checks.hook) })
	t.Cleanup(checks.open) // before Close, which waits for the check

	require.Eventually(t, func() bool { return got.distinct() >= 20 }, patience, 10*time.Millisecond,
		"the subscription sent nothing")
	checks.arm(t)
	// The lock was last confirmed by the check let through before.
	fence := checks.waitEntered(t).Add(relay.LiveStale)
	// The lock goes with its session, as when the server ends it.
	var pid int
	require.NoError(t, b.db.DB.QueryRow(`SELECT l.pid FROM pg_locks l JOIN outbox_events_relays r
		ON l.classid::bigint = (hashtextextended('entoutbox live outbox_events ' || r.relay, 0) >> 32) & 4294967295
		AND l.objid::bigint = hashtextextended('entoutbox live outbox_events ' || r.relay, 0) & 4294967295
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1`).Scan(&pid))
	_, err := b.db.DB.Exec(`SELECT pg_terminate_backend($1)`, pid)
	require.NoError(t, err)
	requireSilentAfter(t, got, want, fence, "the last confirmation of the liveness lock, its session gone")

	checks.open()
	got.paced.Store(false)
	got.waitFor(t, want, patience)
	got.requireExactly(t, want)
}

// A subscription whose renewals keep failing gives its partitions up, and
// with them the rows it held, so that it holds nothing another relay may
// take over; once renewals work again it takes them back and delivers.
func TestSubscriberGivesUpItsPartitionsWhenRenewalsKeepFailing(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	want := emitInOneTx(t, b.client, "refused", 200, 20)
	var failing atomic.Bool
	sub, err := relay.NewSubscriber(b.db.DB, relay.SubscriberConfig{Partitions: 4, Lease: 3 * time.Second,
		PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	relay.OnRenew(sub, func(context.Context) error {
		if failing.Load() {
			return errors.New("renewal refused by the test")
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := sub.Subscribe(ctx, relay.AllTopics)
	require.NoError(t, err)
	// Nobody reads yet: what it claims waits in its memory.
	require.Eventually(t, func() bool { return relay.SubscriberBytesHeld(sub) > 0 }, patience, 10*time.Millisecond,
		"the subscription claimed nothing")
	require.Equal(t, 4, sub.Status().Partitions)

	failing.Store(true)
	require.Eventually(t, func() bool { return sub.Status().Partitions == 0 && relay.SubscriberBytesHeld(sub) == 0 },
		patience, 10*time.Millisecond, "renewals kept failing and the subscription kept its partitions (%d) or rows (%d bytes)",
		sub.Status().Partitions, relay.SubscriberBytesHeld(sub))

	failing.Store(false)
	require.Eventually(t, func() bool { return sub.Status().Partitions == 4 }, patience, 10*time.Millisecond,
		"the partitions did not come back once renewals worked")
	got := newReceived()
	go consume(ctx, msgs, got)
	got.waitFor(t, want, patience)
	got.requireExactly(t, want)
}

// startsPublisher notes when each publish began, and holds every publish
// after the first free ones until held is closed.
type startsPublisher struct {
	message.Publisher
	free   atomic.Int64
	held   chan struct{}
	mu     sync.Mutex
	starts []time.Time
}

func (p *startsPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	p.starts = append(p.starts, time.Now())
	p.mu.Unlock()
	if p.free.Add(-1) < 0 {
		<-p.held
	}
	return p.Publisher.Publish(topic, msgs...)
}

func (p *startsPublisher) startedAfter(at time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, tm := range p.starts {
		if tm.After(at) {
			n++
		}
	}
	return n
}

// A relay whose broker stalls holds messages it took from its
// subscription before the fence, waiting for a publish slot, when its
// renewal hangs or its liveness check does. None of them is published once
// the fence is passed (two thirds of Lease after the last renewal,
// LiveStale after the last confirmation of the lock), however long the
// broker kept them waiting: by then another relay may have the
// partitions. Everything is delivered once all answer again.
func TestRelayPublishesNothingPastTheFence(t *testing.T) {
	const lease = 3 * time.Second
	for _, c := range []struct {
		name  string
		set   func(*relay.Relay, func(context.Context) error)
		fence time.Duration
	}{
		{"renewal hangs", relay.OnRelayRenew, lease * 2 / 3},
		{"liveness check hangs", relay.OnRelayLivenessCheck, relay.LiveStale},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setupEmit(t)
			pubsub, got := receiveInProcess(t, "orders")
			// The broker takes ten publishes, then holds the next: the
			// relay takes what it can from its subscription meanwhile.
			pub := &startsPublisher{Publisher: pubsub, held: make(chan struct{})}
			pub.free.Store(10)
			want := emitInOneTx(t, b.client, "stalled", 300, 100)
			r, err := relay.New(quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: pub,
				Concurrency: 1, Fast: relay.FastConfig{Lease: lease, Partitions: 4}}))
			require.NoError(t, err)
			stalled := newStall()
			c.set(r, stalled.hook)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			var opened sync.Once
			openGate := func() { opened.Do(func() { close(pub.held) }) }
			t.Cleanup(func() {
				openGate()
				stalled.open()
				cancel()
				select {
				case <-done:
				case <-time.After(patience):
					t.Error("the relay did not stop within 40s")
				}
			})

			require.Eventually(t, func() bool { return got.distinct() == 10 }, patience, 10*time.Millisecond,
				"the first publishes did not arrive")
			stalled.arm(t)
			fence := stalled.waitEntered(t).Add(c.fence)
			time.Sleep(time.Until(fence.Add(lease))) // long past it
			openGate()
			time.Sleep(2 * time.Second)
			late := pub.startedAfter(fence.Add(time.Second))
			require.Zero(t, late, "%d publishes began more than a second past the fence", late)
			require.Equal(t, 11, got.distinct(), "only the publish the broker held before the fence arrives")

			stalled.open()
			got.waitFor(t, want, patience)
			seen := got.firstSeen()
			for agg, ids := range want.perAggregate {
				require.Equal(t, ids, seen[agg], "order of aggregate %s", agg)
			}
		})
	}
}

// idsPublisher notes the event ids it published.
type idsPublisher struct {
	message.Publisher
	mu  sync.Mutex
	ids map[string]bool
}

func (p *idsPublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := p.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		p.ids[m.UUID] = true
	}
	return nil
}

// startRelay runs a relay whose renewals first call renew (nil for none),
// until the test ends.
func startRelay(t *testing.T, cfg relay.Config, renew func(context.Context) error) *relay.Relay {
	t.Helper()
	r, err := relay.New(cfg)
	require.NoError(t, err)
	if renew != nil {
		relay.OnRelayRenew(r, renew)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(patience):
			t.Error("a relay did not stop within 40s")
		}
	})
	return r
}

// A relay stalls (its renewals do not begin) while its broker holds a
// publish and it holds more messages waiting for a publish slot. Its
// leases run out and another relay takes its partitions and publishes
// their events. Then the stalled relay renews, finding its partitions
// taken, and its broker answers: of the messages it held, it publishes
// none (a fresh renewal does not make them its own again).
func TestRelayPublishesNothingOfPartitionsItLost(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	pubsub, got := receiveInProcess(t, "orders")
	pubA := &startsPublisher{Publisher: &idsPublisher{Publisher: pubsub, ids: map[string]bool{}}, held: make(chan struct{})}
	pubA.free.Store(10)
	pubB := &idsPublisher{Publisher: pubsub, ids: map[string]bool{}}
	want := emitInOneTx(t, b.client, "lost", 300, 100)
	config := func(id string, pub message.Publisher) relay.Config {
		return quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: pub,
			Concurrency: 1, Fast: relay.FastConfig{RelayID: id, Lease: 3 * time.Second, Partitions: 4}})
	}
	renewals := newStall()
	var opened sync.Once
	openGate := func() { opened.Do(func() { close(pubA.held) }) }
	a := startRelay(t, config("a", pubA), renewals.hook)
	t.Cleanup(func() { openGate(); renewals.open() }) // before a stops: it waits for both

	require.Eventually(t, func() bool { return got.distinct() == 10 }, patience, 10*time.Millisecond,
		"the first publishes did not arrive")
	renewals.arm(t)
	renewals.waitEntered(t)
	startRelay(t, config("b", pubB), nil)
	// The stalled relay's membership lapsed with its leases: the other
	// takes every partition.
	require.Eventually(t, func() bool { o := owners(t, b); return o[keyWithPrefix(o, "b/")] == 4 }, patience,
		10*time.Millisecond, "the second relay did not take the partitions whose lease ran out: %v", owners(t, b))
	require.Eventually(t, func() bool { pubB.mu.Lock(); defer pubB.mu.Unlock(); return len(pubB.ids) > 0 },
		patience, 10*time.Millisecond, "the second relay published nothing")

	now, _ := relay.BytesHeld(a)
	require.Positive(t, now, "the stalled relay holds no message")
	// Its renewal now finds them taken.
	renewals.open()
	require.Eventually(t, func() bool { st, _ := a.Status(); return st.Partitions < 4 }, patience, 10*time.Millisecond,
		"the stalled relay did not renew")
	openGate()
	got.waitFor(t, want, patience)
	// Until it settled every message it held, published or not.
	require.Eventually(t, func() bool { now, _ := relay.BytesHeld(a); return now == 0 }, patience, 10*time.Millisecond,
		"the stalled relay still holds messages")

	// The publish its broker held when it stalled had begun before: it
	// may be one of the partitions lost.
	idsA := pubA.Publisher.(*idsPublisher)
	idsA.mu.Lock()
	pubB.mu.Lock()
	var both []string
	for id := range idsA.ids {
		if pubB.ids[id] {
			both = append(both, id)
		}
	}
	pubB.mu.Unlock()
	idsA.mu.Unlock()
	require.LessOrEqual(t, len(both), 1, "events of partitions the stalled relay lost were published by both: %v", both)
}
