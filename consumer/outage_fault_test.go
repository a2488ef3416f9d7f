package consumer_test

import (
	"context"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/internal/testent/invoice"
	"github.com/entoutbox/entoutbox/relay"
)

// drainBound is the stated bound within which everything committed is
// applied once the server that went away is back (docs/operations.md): a
// liveness bound on a loaded machine, not a speed claim.
const drainBound = 2 * time.Minute

// The consumer's database restarts under load (an immediate stop, as a
// crash, down for seconds, then started): with three instances of one
// consumer name and two relays, nothing is dead-lettered, nothing is lost
// or applied twice, each aggregate's effects keep its order, no delivery
// counted an attempt for the outage, and all of it is applied within
// drainBound after the server is back.
func TestDatabaseRestartUnderLoadLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: restarts a private PostgreSQL under load")
	}
	t.Parallel()
	p, b := setupPrivate(t)
	nats := startNATS(t)
	outageUnderLoad(t, b, nats.url, func() (back time.Time) {
		p.Stop(t, "immediate")
		time.Sleep(8 * time.Second)
		p.Start(t)
		return time.Now()
	})
}

// The broker restarts under load, its streams kept: the same as for the
// database.
func TestBrokerRestartUnderLoadLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: restarts a NATS server under load")
	}
	t.Parallel()
	_, b := setupPrivate(t)
	nats := startNATS(t)
	outageUnderLoad(t, b, nats.url, func() (back time.Time) {
		nats.stop()
		time.Sleep(8 * time.Second)
		nats.start(t)
		return time.Now()
	})
}

// natsServer is a NATS server with JetStream in this process, on a port
// and a store directory it keeps across restarts.
type natsServer struct {
	opts *server.Options
	ns   *server.Server
	url  string
}

func startNATS(t *testing.T) *natsServer {
	t.Helper()
	n := &natsServer{opts: &server.Options{ServerName: "outage-test", Host: "127.0.0.1", Port: server.RANDOM_PORT,
		JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true}}
	n.start(t)
	n.opts.Port = n.ns.Addr().(*net.TCPAddr).Port // the same one after a restart
	n.url = n.ns.ClientURL()
	t.Cleanup(func() { n.stop() })
	return n
}

func (n *natsServer) start(t *testing.T) {
	t.Helper()
	ns, err := server.NewServer(n.opts)
	require.NoError(t, err)
	ns.Start()
	require.True(t, ns.ReadyForConnections(30*time.Second), "NATS ready")
	n.ns = ns
}

func (n *natsServer) stop() {
	n.ns.Shutdown()
	n.ns.WaitForShutdown()
}

// outageUnderLoad runs three consumer instances and two relays on b with
// the broker at natsURL while three writers emit, calls outage while they
// do (it returns when the server is back), and checks what was applied.
func outageUnderLoad(t *testing.T, b *bundle, natsURL string, outage func() (back time.Time)) {
	const (
		aggregates = 40
		instances  = 3
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := natsURL + "?ack_wait=5s&max_in_flight=8"
	open := func() broker.Broker {
		octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
		defer ocancel()
		br, err := broker.Open(octx, url, broker.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = br.Close() })
		return br
	}
	prefix := uniquePrefix()
	// Two relays that retry fast and give up after 3 attempts: an outage
	// that counted would send rows to the dead letters within seconds.
	for range 2 {
		r, err := relay.New(relay.Config{DB: b.db.DB, Publisher: open().Publisher(), TopicPrefix: prefix,
			RetryInterval: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, MaxAttempts: 3,
			PollInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		t.Cleanup(func() { stop(); <-done })
	}
	for range instances {
		br := open()
		h := testent.NewOutboxHandlers(b.client, consumer.WithTopicPrefix(prefix), consumer.WithConcurrency(4),
			consumer.WithLogger(watermill.NopLogger{}))
		h.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
			return tx.Invoice.Create().SetOrderID(e.OrderID).SetAmountCents(m.AggregateSeq).
				SetCurrency(e.Currency).SetConsumer(m.Consumer).Exec(ctx)
		})
		r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
		require.NoError(t, err)
		require.NoError(t, h.AddToRouter(r, br.Subscriber))
		done := make(chan error, 1)
		rctx, stop := context.WithCancel(ctx)
		go func() { done <- r.Run(rctx) }()
		t.Cleanup(func() { stop(); <-done })
		<-r.Running()
	}

	// Writers emit until told to stop; a transaction that fails in the
	// outage is simply not counted (the sequences tell what committed).
	var writing atomic.Bool
	writing.Store(true)
	var writers sync.WaitGroup
	var committed atomic.Int64
	for range 3 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for writing.Load() {
				err := b.client.WithTx(ctx, func(tx *testent.Tx) error {
					for range 1 + rand.IntN(3) {
						order := 1 + rand.Int64N(aggregates)
						if err := tx.Outbox.EmitOrderPaid(ctx, strconv.FormatInt(order, 10),
							testent.OrderPaid{OrderID: order, AmountCents: 1}); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					time.Sleep(50 * time.Millisecond) // the outage
					continue
				}
				committed.Add(1)
				time.Sleep(time.Duration(rand.IntN(10)) * time.Millisecond)
			}
		}()
	}
	applied := func() int {
		n, err := b.client.Invoice.Query().Where(invoice.Consumer("billing")).Count(context.Background())
		if err != nil {
			return -1 // the outage
		}
		return n
	}
	require.Eventually(t, func() bool { return applied() > 200 }, time.Minute, 50*time.Millisecond, "load under way")
	back := outage()
	time.Sleep(3 * time.Second) // load goes on after it
	writing.Store(false)
	writers.Wait()

	// What committed: each aggregate's events are numbered 1..last.
	want := map[int64]int64{}
	total := 0
	for _, s := range b.client.AggregateSequence.Query().AllX(ctx) {
		order, err := strconv.ParseInt(s.AggregateID, 10, 64)
		require.NoError(t, err)
		want[order] = s.LastSeq
		total += int(s.LastSeq)
	}
	for applied() < total && time.Since(back) < drainBound {
		time.Sleep(100 * time.Millisecond)
	}
	drained := time.Since(back)
	time.Sleep(time.Second) // room for an effect too many

	f := billingEffects(t, b, want)
	letters := b.client.DeadLetter.Query().AllX(ctx)
	counted := 0
	for _, pe := range b.client.ProcessedEvent.Query().AllX(ctx) {
		if pe.Attempts > 1 {
			counted++
		}
	}
	t.Logf("%d events in %d transactions over %d aggregates: %d effects, %d missing, %d duplicated, %d inversions, "+
		"%d dead letters, %d applied after a counted attempt; drained %s after the server was back",
		total, committed.Load(), len(want), applied(), f.missing, f.duplicates, f.inversions, len(letters), counted, drained.Round(time.Millisecond))
	if os.Getenv("ENTOUTBOX_OUTAGE_VERBOSE") != "" {
		for _, dl := range letters {
			t.Logf("dead letter from %s: %s", dl.Source, dl.Reason)
		}
	}
	require.Empty(t, letters, "dead letters")
	require.Zero(t, f.missing, "events lost (not applied within %s after the server was back)", drainBound)
	require.Zero(t, f.duplicates+f.inversions, "effects duplicated or out of order; first: %s", strings.Join(f.first, "; "))
	require.Zero(t, counted, "events applied after an attempt counted for the outage")
}
