package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgschema"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/internal/testent/consumerposition"
	"github.com/entoutbox/entoutbox/internal/testent/invoice"
	"github.com/entoutbox/entoutbox/relay"
)

// orderBrokers are the brokers whose groups share a topic among several
// members: the ones a consumer name's instances scale out on. That is every
// broker the project opens by URL.
var orderBrokers = []struct {
	name    string
	service string // what to start when it is not reachable; "" when in process
	url     func(t *testing.T) string
	// inProcess: the broker lives in the process that opens it (mem://
	// opened twice is two buses that share nothing), so its instances are
	// routers of one process sharing one Broker, and a kill closes the
	// instance's subscribers rather than the Broker.
	inProcess bool
	// death, when set, names an instance's connections in the URL it opens
	// and returns that URL and what cuts them as its process's death
	// would; the kill then does it before closing the instance's Broker,
	// whose Close alone would leave in order.
	death func(t *testing.T, url string) (instanceURL string, die func())
}{
	{name: "nats", service: "NATS JetStream at 127.0.0.1:4222", url: orderNATSURL},
	{name: "amqp", service: "RabbitMQ at 127.0.0.1:5672", url: func(*testing.T) string { return "amqp://guest:guest@127.0.0.1:5672/" }},
	{name: "redis", service: "Redis at 127.0.0.1:6379", url: func(*testing.T) string { return "redis://127.0.0.1:6379/0" }},
	{name: "kafka", url: func(t *testing.T) string {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(3))
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return "kafka://" + strings.Join(c.ListenAddrs(), ",")
	}},
	// The broker's tables in a schema of their own, apart from the outbox's.
	{name: "postgres", service: "PostgreSQL at " + pgtest.ServerURL(), url: func(t *testing.T) string { return pgtest.New(t).URL },
		death: postgresDeath},
	{name: "mem", url: func(*testing.T) string { return "mem://" }, inProcess: true},
}

// orderNATSURL is natsURL, whose max_in_flight ENTOUTBOX_ORDER_NATS_IN_FLIGHT
// sets (to measure deep in-flight across instances).
func orderNATSURL(*testing.T) string {
	if n := os.Getenv("ENTOUTBOX_ORDER_NATS_IN_FLIGHT"); n != "" {
		return strings.Replace(natsURL, "max_in_flight=3", "max_in_flight="+n, 1)
	}
	return natsURL
}

// orderEvents is how many events TestInstancesApplyEachAggregateInOrder
// emits per broker; ENTOUTBOX_ORDER_EVENTS sets it (50,000 for a long run).
func orderEvents(t *testing.T) int {
	n := 2000
	if s := os.Getenv("ENTOUTBOX_ORDER_EVENTS"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(t, err, "ENTOUTBOX_ORDER_EVENTS")
	}
	return n
}

// Three instances of one consumer name, each handling three messages at
// once, some of them killed and restarted while events flow; the handler
// fails the first attempt of some events. Events are emitted by the
// generated Emit (which numbers each aggregate's events) and relayed by the
// real relay. Each aggregate's effects are applied once each, in the order
// of its events: its seqs, in the order their effects committed, are 1, 2,
// 3, ... with no inversion, no duplicate and nothing missing.
func TestInstancesApplyEachAggregateInOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: kills and restarts consumer instances over thousands of events on each broker")
	}
	t.Parallel()
	for _, b := range orderBrokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			instancesInOrderOn(t, b.url(t), b.service, b.inProcess, b.death)
		})
	}
}

func instancesInOrderOn(t *testing.T, url, service string, inProcess bool,
	death func(t *testing.T, url string) (string, func())) {
	const (
		aggregates = 50
		instances  = 3
		kills      = 4
	)
	total := orderEvents(t)
	b := setup(t)
	prefix := uniquePrefix()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func(url string) broker.Broker {
		octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
		defer ocancel()
		br, err := broker.Open(octx, url, broker.Options{})
		if err != nil && service != "" {
			pgtest.Unavailable(t, service, err)
		}
		require.NoError(t, err)
		return br
	}
	pub := open(url)
	t.Cleanup(func() { _ = pub.Close() })

	// An instance is a process of its own: its broker connections, its
	// router and its handler set. On an in-process broker it is a router and
	// handler set of this process, with subscribers of its own on the one
	// Broker.
	type instance struct {
		subs *instanceSubscribers
		die  func()
		stop context.CancelFunc
		done chan error
	}
	start := func() *instance {
		br, die := pub, func() {}
		if !inProcess {
			instanceURL := url
			if death != nil {
				instanceURL, die = death(t, url)
			}
			br = open(instanceURL)
		}
		subs := &instanceSubscribers{br: br, own: !inProcess}
		h := testent.NewOutboxHandlers(b.client, consumer.WithTopicPrefix(prefix), consumer.WithConcurrency(3),
			consumer.WithBackoff(5*time.Millisecond, 20*time.Millisecond), consumer.WithGapWait(time.Second),
			consumer.WithLogger(watermill.NopLogger{}))
		h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
			if m.AggregateSeq%5 == 3 && m.Attempt == 1 {
				return fmt.Errorf("first attempt of seq %d fails", m.AggregateSeq)
			}
			return tx.Invoice.Create().SetOrderID(e.OrderID).SetAmountCents(m.AggregateSeq).
				SetCurrency(e.Currency).SetConsumer(m.Consumer).Exec(ctx)
		})
		r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
		require.NoError(t, err)
		require.NoError(t, h.AddToRouter(r, subs.subscriber))
		rctx, stop := context.WithCancel(ctx)
		in := &instance{subs: subs, die: die, stop: stop, done: make(chan error, 1)}
		go func() { in.done <- r.Run(rctx) }()
		select {
		case <-r.Running():
		case err := <-in.done:
			t.Fatalf("router stopped: %v", err)
		case <-time.After(time.Minute):
			t.Fatal("router did not start")
		}
		return in
	}
	// kill drops the instance's broker connections under its handlers,
	// acked or not, as a dying process does, then stops its router.
	kill := func(in *instance) {
		in.die()
		in.subs.drop()
		in.stop()
		<-in.done
	}
	var mu sync.Mutex
	running := make([]*instance, instances)
	for i := range running {
		running[i] = start()
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, in := range running {
			kill(in)
		}
	})
	relayTo(t, ctx, b, pub.Publisher(), prefix)

	// Emit: three writers, transactions of one to three events of random
	// aggregates, some of them rolled back; total counts the order.paid
	// ones.
	var emitMu sync.Mutex
	emitted := map[int64]int64{} // aggregate -> events committed
	paid := map[int64]int64{}    // aggregate -> order.paid events committed (billing handles those)
	committed := 0
	var emitters sync.WaitGroup
	for range 3 {
		emitters.Add(1)
		go func() {
			defer emitters.Done()
			for {
				emitMu.Lock()
				enough := committed >= total
				emitMu.Unlock()
				if enough {
					return
				}
				mine, minePaid := map[int64]int64{}, map[int64]int64{}
				rollback := rand.IntN(10) == 0
				err := b.client.WithTx(ctx, func(tx *testent.Tx) error {
					for range 1 + rand.IntN(3) {
						order := 1 + rand.Int64N(aggregates)
						id := strconv.FormatInt(order, 10)
						var err error
						if rand.IntN(4) == 0 { // one billing has no handler for: it takes its place all the same
							err = tx.Outbox.EmitOrderPlaced(ctx, id, testent.OrderPlaced{OrderID: order, Lines: []testent.OrderPlacedLine{},
								Address: testent.OrderPlacedAddress{Street: "1 rue", City: "Lyon", Country: "FR"}})
						} else {
							err = tx.Outbox.EmitOrderPaid(ctx, id, testent.OrderPaid{OrderID: order, AmountCents: 1})
							minePaid[order]++
						}
						if err != nil {
							return err
						}
						mine[order]++
					}
					if rollback {
						return errRolledBack
					}
					return nil
				})
				if rollback {
					continue
				}
				if err != nil {
					t.Errorf("emit: %v", err)
					return
				}
				emitMu.Lock()
				for order, k := range mine {
					emitted[order] += k
					paid[order] += minePaid[order]
					committed += int(minePaid[order])
				}
				emitMu.Unlock()
			}
		}()
	}
	emitDone := make(chan struct{})
	go func() { emitters.Wait(); close(emitDone) }()

	// Kill an instance and start another in its place, now and then.
	for k := range kills {
		time.Sleep(time.Duration(300+rand.IntN(700)) * time.Millisecond)
		mu.Lock()
		i := k % instances
		kill(running[i])
		running[i] = start()
		mu.Unlock()
	}
	<-emitDone
	total = committed // a few more than asked: each writer's last transaction

	applied := func() int {
		return b.client.Invoice.Query().Where(invoice.Consumer("billing")).CountX(context.Background())
	}
	// Liveness bounds: all of it within 4 minutes and 20 ms an event, and
	// some progress every 30 s (a broken check leaves events that never
	// apply).
	deadline := time.Now().Add(4*time.Minute + time.Duration(total)*20*time.Millisecond)
	began, said, moved, last := time.Now(), time.Now(), time.Now(), 0
	for n := applied(); n < total && time.Now().Before(deadline) && time.Since(moved) < 30*time.Second; n = applied() {
		if n != last {
			moved, last = time.Now(), n
		}
		time.Sleep(200 * time.Millisecond)
		if time.Since(said) > 5*time.Second && os.Getenv("ENTOUTBOX_ORDER_PROGRESS") != "" {
			said = time.Now()
			t.Logf("%s: %d of %d applied", time.Since(began).Round(time.Second), applied(), total)
		}
	}
	time.Sleep(500 * time.Millisecond) // room for an effect too many

	f := billingEffects(t, b, paid)
	letters := b.client.DeadLetter.Query().CountX(context.Background())
	var all int64
	for _, n := range emitted {
		all += n
	}
	t.Logf("%d events (%d order.paid) over %d aggregates: %d effects, %d inversions, %d duplicated, %d missing, %d dead letters",
		all, total, len(emitted), applied(), f.inversions, f.duplicates, f.missing, letters)
	require.Zero(t, f.inversions+f.duplicates+f.missing, "effects out of order, duplicated or missing; first: %s", strings.Join(f.first, "; "))
	require.Zero(t, letters, "dead letters")
	// The order came from the check: every aggregate's position is at its
	// last event (a message without a seq would be applied unchecked).
	// The loop above waited for the order.paid effects; an aggregate's last
	// event may be of another type, still on its way: a liveness bound.
	atLast := func() bool {
		for order, n := range emitted {
			pos, err := b.client.ConsumerPosition.Query().Where(consumerposition.Consumer("billing"),
				consumerposition.AggregateID(strconv.FormatInt(order, 10))).Only(context.Background())
			if err != nil || pos.LastSeq != n {
				return false
			}
		}
		return true
	}
	for end := time.Now().Add(time.Minute); !atLast() && time.Now().Before(end); {
		time.Sleep(200 * time.Millisecond)
	}
	for order, n := range emitted {
		pos := b.client.ConsumerPosition.Query().Where(consumerposition.Consumer("billing"),
			consumerposition.AggregateID(strconv.FormatInt(order, 10))).OnlyX(context.Background())
		require.Equal(t, n, pos.LastSeq, "position of aggregate %d", order)
	}
}

// instanceSubscribers makes an instance's subscribers and drops them all
// when it is killed: with its own Broker, by closing the Broker (its
// connections); on a Broker it shares, by closing each subscriber, which
// gives the messages it holds back to the group as a closed connection
// does.
type instanceSubscribers struct {
	br  broker.Broker
	own bool

	mu   sync.Mutex
	subs []message.Subscriber
}

func (s *instanceSubscribers) subscriber(group string) (message.Subscriber, error) {
	sub, err := s.br.Subscriber(group)
	if err == nil {
		s.mu.Lock()
		s.subs = append(s.subs, sub)
		s.mu.Unlock()
	}
	return sub, err
}

func (s *instanceSubscribers) drop() {
	if s.own {
		_ = s.br.Close()
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sub := range s.subs {
		_ = sub.Close()
	}
}

// postgresDeath names an instance's connections with an application_name
// of its own, and kills them in the server: a subscriber's transaction
// then rolls back, acked messages of its batch included, and they come
// again to another instance, as when the process dies. (Closing the
// subscriber instead commits what was acked.)
func postgresDeath(t *testing.T, url string) (string, func()) {
	name := "order-instance-" + strings.TrimSuffix(uniquePrefix(), "_")
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "application_name=" + name, func() {
		db, err := pgschema.Open(url)
		require.NoError(t, err)
		defer db.Close()
		_, err = db.Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, name)
		require.NoError(t, err, "killing the connections of %s", name)
	}
}

// effectFaults counts a consumer's effects against the events it had to
// apply: seqs applied after a later one of their aggregate, applied twice,
// or not applied; first describes the first few.
type effectFaults struct {
	inversions, duplicates, missing int
	first                           []string
}

// billingEffects reads consumer billing's effects (an invoice per applied
// event, its amount the event's seq, in insertion order) and checks them
// against want (aggregate -> how many events billing had to apply).
func billingEffects(t *testing.T, b *bundle, want map[int64]int64) effectFaults {
	t.Helper()
	got := map[int64][]int64{}
	for _, inv := range b.client.Invoice.Query().Where(invoice.Consumer("billing")).Order(invoice.ByID()).AllX(context.Background()) {
		got[inv.OrderID] = append(got[inv.OrderID], inv.AmountCents)
	}
	var f effectFaults
	for order, n := range want {
		seen := map[int64]bool{}
		var top int64
		for i, seq := range got[order] {
			if (seen[seq] || seq < top) && len(f.first) < 5 {
				f.first = append(f.first, fmt.Sprintf("aggregate %d applied %v", order, got[order][:i+1]))
			}
			switch {
			case seen[seq]:
				f.duplicates++
			case seq < top:
				f.inversions++
			}
			seen[seq] = true
			top = max(top, seq)
		}
		if lost := int(n) - len(seen); lost > 0 {
			f.missing += lost
			if len(f.first) < 5 {
				f.first = append(f.first, fmt.Sprintf("aggregate %d: %d of its %d events not applied", order, lost, n))
			}
		}
	}
	return f
}

var errRolledBack = errors.New("rolled back on purpose")

// relayTo runs the fast relay from b's outbox to pub until the test ends.
func relayTo(t *testing.T, ctx context.Context, b *bundle, pub message.Publisher, prefix string) {
	t.Helper()
	r, err := relay.New(relay.Config{DB: b.db.DB, Publisher: pub, TopicPrefix: prefix,
		PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done })
}
