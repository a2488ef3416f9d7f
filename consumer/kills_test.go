package consumer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/tcpproxy"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/internal/testent/consumerposition"
	"github.com/entoutbox/entoutbox/internal/testent/invoice"
)

const (
	// killEvents over killAggregates, hotShare of them on aggregate
	// hotAggregate: the skew of real traffic (a tenant, an account).
	killEvents     = 600
	killAggregates = 10
	hotAggregate   = 1
	hotShare       = 0.6
	// killInstances of one consumer name; two of them are killed.
	killInstances = 3
	// killDrainBound is the stated bound within which everything is
	// applied after the last kill: a liveness bound on a loaded 2-core
	// machine, not a speed claim.
	killDrainBound = 3 * time.Minute
	// killStep is the longest wait for a kill's point of progress.
	killStep = time.Minute
)

// Three instances of one consumer name on each broker a group shares,
// ten aggregates of which one holds most events, the handler failing the
// first attempt of one event in twenty (chosen by event id), and two kills:
// each time the instance that last handled the hot aggregate dies as a
// process does (its connections cut under it, nothing acked or nacked on
// its way out), and a new one takes its place. Every event's effect is
// applied once, each aggregate's in seq order, all of it within
// killDrainBound after the last kill. One
// instance handles each event alone (WithBatchSize(1)), the others in
// batches: both ways of applying a run are under the kills. (On Kafka the
// partition keeps an aggregate's order and the number check sees no gap:
// there the test guards exactly-once through rebalances; on the other
// three, order too.)
func TestKilledInstancesKeepEachAggregateInOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: kills consumer instances on four brokers")
	}
	t.Parallel()
	for _, b := range orderBrokers {
		if !slices.Contains([]string{"nats", "amqp", "kafka", "redis"}, b.name) {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			k := &killRun{t: t, name: b.name, url: b.url(t), service: b.service, b: setup(t), prefix: uniquePrefix()}
			k.run()
		})
	}
}

// killRun is one broker's run of TestKilledInstancesKeepEachAggregateInOrder.
type killRun struct {
	t                     *testing.T
	name, url, service    string
	b                     *bundle
	prefix                string
	ctx                   context.Context
	pub                   broker.Broker
	hotHolder             atomic.Int64 // the slot of the instance that last handled the hot aggregate
	instances             [killInstances]*killInstance
	attempts, firstFailed atomic.Int64
}

// killInstance is a consumer instance: a process of its own, with its
// broker connections, router and handler set.
type killInstance struct {
	subs *instanceSubscribers
	die  func()
	stop context.CancelFunc
	done chan error
}

func (k *killRun) run() {
	t := k.t
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k.ctx = ctx
	k.cleanStreams()
	k.pub = k.open(k.url)
	t.Cleanup(func() { _ = k.pub.Close() })
	for i := range k.instances {
		k.instances[i] = k.start(i)
	}
	t.Cleanup(func() {
		// All at once: over cut connections each takes the broker
		// client's timeouts (10 s on NATS).
		var dying sync.WaitGroup
		for _, in := range k.instances {
			dying.Go(func() { k.kill(in) })
		}
		dying.Wait()
	})
	relayTo(t, ctx, k.b, k.pub.Publisher(), k.prefix)
	emitted := make(chan struct{})
	go func() { defer close(emitted); k.emit() }()

	// Kill the hot aggregate's instance a third and two thirds of the way,
	// or after killStep if it gets there slower: the kills happen during
	// the run, and the test ends within its bounds either way.
	var lastKill time.Time
	for _, part := range []int{1, 2} {
		k.waitApplied(killEvents*part/3, killStep)
		i := k.hotHolder.Load()
		k.t.Logf("%s: kill %d, of instance %d, at %d applied", k.name, part, i, k.applied())
		lastKill = time.Now()
		k.kill(k.instances[i])
		k.instances[i] = k.start(int(i))
	}
	<-emitted
	want, total := k.committed()
	// Drained: every event applied, or every position at its aggregate's
	// last event (an event skipped over never comes).
	bound := killDrainBound
	for k.applied() < total && !k.positionsAt(want) && time.Since(lastKill) < bound {
		time.Sleep(100 * time.Millisecond)
	}
	drained := time.Since(lastKill)
	time.Sleep(500 * time.Millisecond) // room for an effect too many

	f := billingEffects(t, k.b, want)
	letters := k.b.client.DeadLetter.Query().CountX(context.Background())
	hot := want[hotAggregate]
	t.Logf("%s: %d events (%d on the hot aggregate), %d effects, %d handler calls (%d failed on purpose): "+
		"%d inversions, %d duplicated, %d missing, %d dead letters; drained %s after the last kill",
		k.name, total, hot, k.applied(), k.attempts.Load(), k.firstFailed.Load(),
		f.inversions, f.duplicates, f.missing, letters, drained.Round(time.Millisecond))
	require.Zero(t, f.inversions+f.duplicates+f.missing, "effects out of order, duplicated or missing (not applied within %s "+
		"after the last kill); first: %s", bound, strings.Join(f.first, "; "))
	require.Zero(t, letters, "dead letters")
	require.Positive(t, k.firstFailed.Load(), "some first attempts failed")
	require.True(t, k.positionsAt(want), "every position at its aggregate's last event")
}

// positionsAt tells whether billing's position on each aggregate is at
// want's last event.
func (k *killRun) positionsAt(want map[int64]int64) bool {
	at := 0
	for _, p := range k.b.client.ConsumerPosition.Query().Where(consumerposition.Consumer("billing")).AllX(context.Background()) {
		if order, err := strconv.ParseInt(p.AggregateID, 10, 64); err == nil && want[order] == p.LastSeq {
			at++
		}
	}
	return at == len(want)
}

func (k *killRun) open(url string) broker.Broker {
	octx, cancel := context.WithTimeout(k.ctx, 30*time.Second)
	defer cancel()
	br, err := broker.Open(octx, url, broker.Options{})
	if err != nil && k.service != "" {
		pgtest.Unavailable(k.t, k.service, err)
	}
	require.NoError(k.t, err)
	return br
}

// start starts an instance in slot i. Its connections go through a proxy
// that its death cuts, except on Kafka (kfake's brokers advertise their own
// addresses, which clients dial after the first): there it dies by its
// Broker's Close, which leaves the group: what it held and had not acked
// comes again to the member that takes its partitions.
func (k *killRun) start(slot int) *killInstance {
	t := k.t
	instanceURL, die := k.url, func() {}
	if k.name != "kafka" {
		instanceURL, die = proxyDeath(t, k.url)
	}
	subs := &instanceSubscribers{br: k.open(instanceURL), own: true}
	opts := []consumer.Option{consumer.WithTopicPrefix(k.prefix), consumer.WithConcurrency(3),
		consumer.WithBackoff(5*time.Millisecond, 20*time.Millisecond), consumer.WithGapWait(time.Second),
		consumer.WithLogger(watermill.NopLogger{})}
	if slot == killInstances-1 {
		opts = append(opts, consumer.WithBatchSize(1))
	}
	h := testent.NewOutboxHandlers(k.b.client, opts...)
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		k.attempts.Add(1)
		if m.EventID[15]%20 == 0 && m.Attempt == 1 { // the last byte is random in a UUIDv7 as in a v4
			k.firstFailed.Add(1)
			return fmt.Errorf("first attempt of event %s fails", m.EventID)
		}
		if e.OrderID == hotAggregate {
			k.hotHolder.Store(int64(slot))
		}
		return tx.Invoice.Create().SetOrderID(e.OrderID).SetAmountCents(m.AggregateSeq).
			SetCurrency(e.Currency).SetConsumer(m.Consumer).Exec(ctx)
	})
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	require.NoError(t, h.AddToRouter(r, subs.subscriber))
	rctx, stop := context.WithCancel(k.ctx)
	in := &killInstance{subs: subs, die: die, stop: stop, done: make(chan error, 1)}
	go func() { in.done <- r.Run(rctx) }()
	select {
	case <-r.Running():
	case err := <-in.done:
		t.Fatalf("router stopped: %v", err)
	case <-time.After(patience):
		t.Fatal("router did not start")
	}
	return in
}

// kill cuts the instance's connections under its handlers, acked or not,
// then stops its router and closes what is left of its Broker. The router
// stops first: with its server unreachable, a RabbitMQ subscriber's Close
// waits for the end of its subscription's context (watermill-amqp's
// reconnect loop does not watch the subscriber's closing).
func (k *killRun) kill(in *killInstance) {
	in.die()
	in.stop()
	<-in.done
	in.subs.drop()
}

// emit commits killEvents order.paid events (a few more: each writer's
// last transaction) from three writers, in transactions of one to three
// events, hotShare of them on the hot aggregate.
func (k *killRun) emit() {
	var committed atomic.Int64
	var writers sync.WaitGroup
	for range 3 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for committed.Load() < killEvents && k.ctx.Err() == nil {
				n := 1 + rand.IntN(3)
				err := k.b.client.WithTx(k.ctx, func(tx *testent.Tx) error {
					for range n {
						order := int64(hotAggregate)
						if rand.Float64() >= hotShare {
							order = 2 + rand.Int64N(killAggregates-1)
						}
						if err := tx.Outbox.EmitOrderPaid(k.ctx, strconv.FormatInt(order, 10),
							testent.OrderPaid{OrderID: order, AmountCents: 1}); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					k.t.Errorf("emit: %v", err)
					return
				}
				committed.Add(int64(n))
			}
		}()
	}
	writers.Wait()
}

// committed is what was emitted: each aggregate's events are numbered
// 1..last.
func (k *killRun) committed() (map[int64]int64, int) {
	want, total := map[int64]int64{}, 0
	for _, s := range k.b.client.AggregateSequence.Query().AllX(context.Background()) {
		order, err := strconv.ParseInt(s.AggregateID, 10, 64)
		require.NoError(k.t, err)
		want[order] = s.LastSeq
		total += int(s.LastSeq)
	}
	return want, total
}

func (k *killRun) applied() int {
	return k.b.client.Invoice.Query().Where(invoice.Consumer("billing")).CountX(context.Background())
}

// waitApplied waits until n effects are applied, for bound at most.
func (k *killRun) waitApplied(n int, bound time.Duration) {
	for deadline := time.Now().Add(bound); k.applied() < n && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
}

// cleanStreams deletes the run's stream at the end where the broker keeps
// one on disk or in memory for good.
func (k *killRun) cleanStreams() {
	switch k.name {
	case "nats":
		deleteStreamAfter(k.t, k.prefix+"orders")
	case "redis":
		k.t.Cleanup(func() {
			opts, err := redis.ParseURL(k.url)
			if err != nil {
				return
			}
			c := redis.NewClient(opts)
			defer c.Close()
			_ = c.Del(context.Background(), k.prefix+"orders").Err()
		})
	}
}

// proxyDeath runs a TCP proxy to rawURL's host and returns rawURL through
// it, and what cuts every connection through it at once and refuses new
// ones: the network's view of a process that dies. What the instance does
// on its way out (a Close that acks, nacks or gives entries back) reaches
// no server.
func proxyDeath(t *testing.T, rawURL string) (string, func()) {
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	p := tcpproxy.Start(t, u.Host)
	u.Host = p.Addr
	return u.String(), p.Cut
}
