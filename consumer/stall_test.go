package consumer_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/promtest"
	"github.com/entoutbox/entoutbox/internal/tcpproxy"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/internal/testent/invoice"
	"github.com/entoutbox/entoutbox/metrics"
)

// One aggregate holds most of a topic's events, three instances of one
// consumer name share it with their default windows (128 messages each),
// and one instance dies (its connection cut: nothing acked or nacked) while
// they drain it, then starts again. The dead instance's messages, the hot
// aggregate's next ones, come again only after ack_wait, while the live
// instances' windows are full of its later events, which wait: those must
// leave room for the earlier ones (shedding, and a nack delay so that they
// do not come straight back), or the aggregate moves one event per nack
// round. Every event is applied once, in order, within a generous bound.
func TestHotAggregateDrainsAfterAKill(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: drains a hot aggregate across three NATS instances, one killed (about a minute)")
	}
	t.Parallel()
	const (
		hot, cold = 700, 40 // events of aggregate 1; of aggregates 2 and 3
		instances = 3
		killAt    = 150             // events applied when an instance dies
		bound     = 4 * time.Minute // after the kill: a liveness bound on a loaded machine
	)
	b := setup(t)
	prefix := uniquePrefix()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := "nats://127.0.0.1:4222?ack_wait=5s"
	pub := openStallBroker(t, ctx, url)
	want := map[int64]int64{1: hot, 2: cold, 3: cold}
	emitAll(t, ctx, b, want)
	relayTo(t, ctx, b, pub.Publisher(), prefix)

	var redelivered atomic.Int64
	start := func() *stallInstance { return startStallInstance(t, ctx, b, prefix, url, &redelivered) }
	running := make([]*stallInstance, instances)
	for i := range running {
		running[i] = start()
	}
	t.Cleanup(func() {
		for _, in := range running {
			in.kill()
		}
	})
	applied := func() int {
		return b.client.Invoice.Query().Where(invoice.Consumer("billing")).CountX(context.Background())
	}
	total := int(hot + 2*cold)
	began := time.Now()
	require.Eventually(t, func() bool { return applied() >= killAt }, patience, 50*time.Millisecond, "the first events")
	killedAt, atKill := time.Now(), applied()
	running[0].kill() // its window comes again after ack_wait only
	running[0] = start()

	deadline, said := time.Now().Add(bound), time.Now()
	for applied() < total && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if time.Since(said) > 5*time.Second && os.Getenv("ENTOUTBOX_STALL_PROGRESS") != "" {
			said = time.Now()
			t.Logf("%s after the kill: %d of %d applied", time.Since(killedAt).Round(time.Second), applied(), total)
		}
	}
	t.Logf("%d of %d events applied in %s: %d before the kill, the rest in %s after it; %d deliveries were redeliveries",
		applied(), total, time.Since(began).Round(100*time.Millisecond), atKill,
		time.Since(killedAt).Round(100*time.Millisecond), redelivered.Load())
	requireAppliedInOrder(t, b, want)
}

func openStallBroker(t *testing.T, ctx context.Context, url string) broker.Broker {
	t.Helper()
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	br, err := broker.Open(octx, url, broker.Options{})
	if err != nil {
		pgtest.Unavailable(t, "NATS JetStream at 127.0.0.1:4222", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = br.Close() })
	return br
}

// startStallInstance starts a consumer instance of "billing" whose broker
// connections go through a proxy of its own; it counts the redeliveries.
func startStallInstance(t *testing.T, ctx context.Context, b *bundle, prefix, url string, redelivered *atomic.Int64) *stallInstance {
	t.Helper()
	in := &stallInstance{proxy: tcpproxy.Start(t, "127.0.0.1:4222")}
	in.br = openStallBroker(t, ctx, strings.Replace(url, "127.0.0.1:4222", in.proxy.Addr, 1))
	h := testent.NewOutboxHandlers(b.client, consumer.WithTopicPrefix(prefix), consumer.WithLogger(watermill.NopLogger{}))
	h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		return tx.Invoice.Create().SetOrderID(e.OrderID).SetAmountCents(m.AggregateSeq).
			SetCurrency(e.Currency).SetConsumer(m.Consumer).Exec(ctx)
	})
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	r.AddMiddleware(func(next message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			if n, _ := strconv.Atoi(msg.Metadata.Get(events.MetaDeliveryCount)); n > 1 {
				redelivered.Add(1)
			}
			return next(msg)
		}
	})
	require.NoError(t, h.AddToRouter(r, in.br.Subscriber))
	rctx, stop := context.WithCancel(ctx)
	in.stop, in.done = stop, make(chan error, 1)
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

// stallInstance is a consumer instance whose broker connection goes
// through a proxy of its own, so that a kill cuts it as a dying process
// does: what it holds is neither acked nor nacked.
type stallInstance struct {
	proxy *tcpproxy.Proxy
	br    broker.Broker
	stop  context.CancelFunc
	done  chan error
	once  sync.Once
}

func (in *stallInstance) kill() {
	in.once.Do(func() {
		in.proxy.Cut() // first: nothing the instance sends from now on reaches the server
		in.stop()
		go func() { <-in.done; _ = in.br.Close() }() // its naks go nowhere
	})
}

// emitAll emits want[aggregate] order.paid events of each aggregate in
// transactions of up to 50, aggregate after aggregate in key order: the
// later aggregates' events wait in the stream behind the first one's.
func emitAll(t *testing.T, ctx context.Context, b *bundle, want map[int64]int64) {
	t.Helper()
	for order := int64(1); order <= int64(len(want)); order++ {
		for left := want[order]; left > 0; left -= min(left, 50) {
			require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
				for range min(left, 50) {
					if err := tx.Outbox.EmitOrderPaid(ctx, strconv.FormatInt(order, 10),
						testent.OrderPaid{OrderID: order, AmountCents: 1}); err != nil {
						return err
					}
				}
				return nil
			}))
		}
	}
}

// requireAppliedInOrder checks that each aggregate's effects are its seqs
// 1..want, once each, in order.
func requireAppliedInOrder(t *testing.T, b *bundle, want map[int64]int64) {
	t.Helper()
	got := map[int64][]int64{}
	for _, inv := range b.client.Invoice.Query().Where(invoice.Consumer("billing")).Order(invoice.ByID()).AllX(context.Background()) {
		got[inv.OrderID] = append(got[inv.OrderID], inv.AmountCents)
	}
	for order, n := range want {
		seqs := got[order]
		bad := ""
		for i, seq := range seqs {
			if seq != int64(i+1) {
				bad = fmt.Sprintf("; at %d: seq %d", i, seq)
				break
			}
		}
		require.Equal(t, int(n), len(seqs), "aggregate %d: effects applied%s", order, bad)
		require.Empty(t, bad, "aggregate %d: effects out of order or duplicated", order)
	}
}

// A topic on which the instance holds an event that waits, and applies
// none, for StallAfter is said to be stalled, once, naming the topic, the
// consumer and the seq it waits for, and its gauge is 1; the first event
// applied on it says it moves again and sets the gauge back to 0. The
// nacks of the waiting event before that are normal flow, not a stall.
func TestAStalledTopicIsSaidOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	logs := &captureLogger{}
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	h := testent.NewOutboxHandlers(b.client, append(fast(), consumer.WithGapWait(200*time.Millisecond),
		consumer.WithMaxGap(time.Hour), consumer.WithStartAfter(-1), consumer.WithStallAfter(time.Second),
		consumer.WithLogger(logs), consumer.WithMetrics(m))...)
	var calls atomic.Int64
	h.OnOrderPaid("billing", seqHandler(&calls, nil))
	stalled := func() float64 {
		return promtest.Value(t, reg, "entoutbox_consumer_stalled", "consumer", "billing", "topic", "orders")
	}
	said := func(prefix string) (n int) {
		logs.mu.Lock()
		defer logs.mu.Unlock()
		for _, l := range logs.msgs {
			if strings.HasPrefix(l.Msg, prefix) {
				n++
			}
		}
		return n
	}

	second := seqMessage(t, 1, 2) // seq 1 does not come yet
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		err := h.Handle(ctx, "billing", second.Copy())
		require.ErrorContains(t, err, "nacked, to come again")
	}
	require.Equal(t, 1, said("consumer billing is stalled on topic orders"), "said once")
	require.Contains(t, logs.msgs[slices.IndexFunc(logs.msgs, func(l watermill.CapturedMessage) bool {
		return strings.HasPrefix(l.Msg, "consumer billing is stalled")
	})].Msg, "seq 2 of aggregate Order/1 waits for seq 1")
	require.Equal(t, 1.0, stalled())

	require.NoError(t, h.Handle(ctx, "billing", seqMessage(t, 1, 1)))
	require.Equal(t, 0.0, stalled(), "it moves again")
	require.Equal(t, 1, said("consumer billing moves again on topic orders"))
	require.NoError(t, h.Handle(ctx, "billing", second.Copy()))
	require.Equal(t, []int64{1, 2}, b.applied(t, "billing", 1))
}
