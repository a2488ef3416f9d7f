package consumer_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/internal/testent/invoice"
)

// One aggregate holds most of a topic's events, three instances of one
// consumer name with small windows share it, and one instance dies (its
// connection cut, nothing nacked) while they drain it, then comes back.
// The dead instance's messages come again only after ack_wait, while the
// live instances' windows fill with later events of the hot aggregate:
// those must not keep its predecessors, nor the other aggregates' events,
// out. Every event is applied once, in order, within a generous bound.
func TestHotAggregateDrainsAfterAKill(t *testing.T) {
	t.Parallel()
	const (
		cold      = 40 // events of aggregate 1; of aggregates 2 and 3
		instances = 3
		bound     = 40 * time.Second // a liveness bound on a loaded machine
	)
	b := setup(t)
	prefix := uniquePrefix()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	win := "8"
	if v := os.Getenv("STALL_WIN"); v != "" {
		win = v
	}
	gapWait := 5 * time.Second
	if v := os.Getenv("STALL_GAP"); v != "" {
		gapWait, _ = time.ParseDuration(v)
	}
	ackWait := "2s"
	if v := os.Getenv("STALL_ACK"); v != "" {
		ackWait = v
	}
	hot := int64(400)
	if v := os.Getenv("STALL_HOT"); v != "" {
		hot, _ = strconv.ParseInt(v, 10, 64)
	}
	url := "nats://127.0.0.1:4222?ack_wait=" + ackWait + "&max_in_flight=" + win
	open := func(url string) broker.Broker {
		octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
		defer ocancel()
		br, err := broker.Open(octx, url, broker.Options{})
		if err != nil {
			pgtest.Unavailable(t, "NATS JetStream at 127.0.0.1:4222", err)
		}
		require.NoError(t, err)
		return br
	}
	pub := open(url)
	t.Cleanup(func() { _ = pub.Close() })

	// Everything is in the stream before the consumers start.
	want := map[int64]int64{1: hot, 2: cold, 3: cold}
	emitAll(t, ctx, b, want)
	relayTo(t, ctx, b, pub.Publisher(), prefix)

	var redelivered atomic.Int64
	start := func() *stallInstance {
		in := &stallInstance{proxy: startNATSProxy(t, "127.0.0.1:4222")}
		in.br = open(strings.Replace(url, "127.0.0.1:4222", in.proxy.addr(), 1))
		var logger watermill.LoggerAdapter = watermill.NopLogger{}
		if os.Getenv("STALL_DEBUG") != "" {
			logger = watermill.NewStdLogger(true, false)
		}
		h := testent.NewOutboxHandlers(b.client, consumer.WithTopicPrefix(prefix), consumer.WithGapWait(gapWait),
			consumer.WithLogger(logger))
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
				out, err := next(msg)
				if err != nil && os.Getenv("STALL_DEBUG") != "" {
					fmt.Printf("%s nack %s: %v\n", time.Now().Format("15:04:05.000"), msg.Metadata.Get(events.MetaAggregateSeq), err)
				}
				return out, err
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
		case <-time.After(time.Minute):
			t.Fatal("router did not start")
		}
		return in
	}
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
	require.Eventually(t, func() bool { return applied() >= total/10 }, bound, 50*time.Millisecond, "the first tenth")
	killedAt, atKill := time.Now(), applied()
	if os.Getenv("STALL_NOKILL") == "" {
		running[0].kill() // its window's messages come again after ack_wait only
		running[0] = start()
	}
	go func() {
		for ctx.Err() == nil && os.Getenv("STALL_DEBUG") != "" {
			time.Sleep(2 * time.Second)
			fmt.Printf("%s applied %d\n", time.Now().Format("15:04:05.000"), applied())
		}
	}()

	coldApplied := func() int {
		return b.client.Invoice.Query().Where(invoice.Consumer("billing"), invoice.OrderIDGT(1)).CountX(context.Background())
	}
	deadline := time.Now().Add(bound)
	var coldDone time.Duration
	for applied() < total && time.Now().Before(deadline) {
		if coldDone == 0 && coldApplied() == 2*cold {
			coldDone = time.Since(killedAt)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the other aggregates drained %s after the kill", coldDone.Round(100*time.Millisecond))
	n := applied()
	t.Logf("%d of %d events applied in %s (%d at the kill, %s after it); %d redelivered",
		n, total, time.Since(began).Round(100*time.Millisecond), atKill, time.Since(killedAt).Round(100*time.Millisecond),
		redelivered.Load())
	if n < total && os.Getenv("STALL_DEBUG") != "" {
		for _, p := range b.client.ConsumerPosition.Query().AllX(context.Background()) {
			t.Logf("position %s: last %d waiting %v held %v", p.AggregateID, p.LastSeq, p.WaitingSeq, p.HeldSeq)
		}
		f, _ := os.Create("/tmp/stall-goroutines.txt")
		_ = pprof.Lookup("goroutine").WriteTo(f, 2)
		f.Close()
	}
	requireAppliedInOrder(t, b, want)
}

// stallInstance is a consumer instance whose broker connection goes
// through a proxy of its own, so that a kill cuts it as a dying process
// does: what it holds is neither acked nor nacked.
type stallInstance struct {
	proxy *natsProxy
	br    broker.Broker
	stop  context.CancelFunc
	done  chan error
	once  sync.Once
}

func (in *stallInstance) kill() {
	in.once.Do(func() {
		in.proxy.close() // first: nothing the instance sends from now on reaches the server
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

// natsProxy forwards connections to a NATS server until it is closed,
// which cuts them all and refuses new ones.
type natsProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func startNATSProxy(t *testing.T, target string) *natsProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &natsProxy{ln: ln}
	t.Cleanup(p.close)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
			go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
		}
	}()
	return p
}

func (p *natsProxy) addr() string { return p.ln.Addr().String() }

func (p *natsProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}
