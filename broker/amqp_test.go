package broker

import (
	"context"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/entoutbox/entoutbox/internal/tcpproxy"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func amqpChannel(t *testing.T) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(amqpURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	return ch
}

// amqpSetup deletes the exchange and the group queues of the test's topic.
func amqpSetup(t *testing.T, topic string) string {
	need(t, "RabbitMQ", amqpURL)
	t.Cleanup(func() {
		conn, err := amqp.Dial(amqpURL)
		if err != nil {
			t.Logf("cleaning up: %v", err)
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Logf("cleaning up: %v", err)
			return
		}
		for _, q := range amqpQueues.get(topic) {
			group := strings.TrimPrefix(q, topic+"_")
			for k := range DefaultPartitions + 1 { // (deleting a missing queue is fine)
				_, _ = ch.QueueDelete(amqpPartitionQueue(topic, group, k), false, false, false)
			}
			if _, err := ch.QueueDelete(q, false, false, false); err != nil {
				t.Logf("deleting queue %s: %v", q, err)
			}
		}
		for _, x := range []string{amqpSplitExchange(topic), amqpRestExchange(topic), topic} {
			if err := ch.ExchangeDelete(x, false, false); err != nil {
				t.Logf("deleting exchange %s: %v", x, err)
			}
		}
	})
	return amqpURL
}

// amqpQueues lists, per topic, the group queues a test made, for clean-up.
var amqpQueues = newSyncLists()

// amqpChecks binds a queue of its own to the topic's exchange and checks
// each message carries its UUID as AMQP message-id.
func amqpChecks(ctx context.Context, t *testing.T, _, topic, group string) func([]sentMessage) {
	amqpQueues.add(topic, topic+"_"+group)
	ch := amqpChannel(t)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(q.Name, "", topic, false, nil))
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	require.NoError(t, err)
	return func(sent []sentMessage) {
		for i, m := range sent {
			select {
			case d := <-deliveries:
				assert.Equal(t, m.uuid, d.MessageId, "message-id of message %d", i)
				assert.Equal(t, m.uuid, d.Headers[wmamqp.DefaultMessageUUIDHeaderKey], "UUID header of message %d", i)
				assert.Equal(t, uint8(amqp.Persistent), d.DeliveryMode)
			case <-ctx.Done():
				t.Fatalf("raw consumer got %d of %d messages", i, len(sent))
			case <-time.After(patience):
				t.Fatalf("raw consumer got %d of %d messages", i, len(sent))
			}
		}
	}
}

func TestAMQPGroupShares(t *testing.T) {
	t.Parallel()
	topic := "entoutbox.share." + randomSuffix()
	rawURL := amqpSetup(t, topic)
	amqpQueues.add(topic, topic+"_a", topic+"_b")
	testGroupShares(t, rawURL, topic)
}

// TestAMQPUnroutableIsAFailure publishes to an exchange no queue is bound
// to: Publish fails, naming the message and the cause. Once a group has
// subscribed (declaring and binding its queue), Publish succeeds and the
// group receives the message.
func TestAMQPUnroutableIsAFailure(t *testing.T) {
	t.Parallel()
	topic := "entoutbox.unroutable." + randomSuffix()
	group := "g-" + randomSuffix()
	rawURL := amqpSetup(t, topic)
	amqpQueues.add(topic, topic+"_"+group)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	b, err := Open(ctx, rawURL, Options{})
	require.NoError(t, err)
	defer func() { assert.NoError(t, b.Close()) }()

	lost := newMessages(1)[0]
	err = b.Publisher().Publish(topic, lost.message())
	require.Error(t, err)
	assert.Equal(t, `broker: amqp: message `+lost.uuid+` to exchange "`+topic+`" was returned unroutable (NO_ROUTE): `+
		`no queue is bound; start the consumers (or declare their queues) before the relay`, err.Error())

	// Two messages in one Publish: both returned, one error says so.
	err = b.Publisher().Publish(topic, newMessages(1)[0].message(), newMessages(1)[0].message())
	assert.ErrorContains(t, err, "was returned unroutable (NO_ROUTE)")
	assert.ErrorContains(t, err, "(and 1 more of this publish)")

	sub, err := b.Subscriber(group)
	require.NoError(t, err)
	ch, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	sent := newMessages(3)
	require.NoError(t, b.Publisher().Publish(topic, sent[0].message(), sent[1].message()))
	publish(t, b, topic, sent[2:])
	assertSame(t, sent, receive(ctx, t, ch, len(sent)), true)
	assertNothingMore(t, ch, 200*time.Millisecond) // the returned ones never arrive
}

// TestAMQPConcurrentPublishes publishes from many goroutines at once to a
// topic with a queue and to one without: each Publish reports its own
// message's fate, never another's.
func TestAMQPConcurrentPublishes(t *testing.T) {
	t.Parallel()
	bound := "entoutbox.bound." + randomSuffix()
	unbound := "entoutbox.unbound." + randomSuffix()
	rawURL := amqpSetup(t, bound)
	amqpSetup(t, unbound)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	b, err := Open(ctx, rawURL, Options{})
	require.NoError(t, err)
	defer func() { assert.NoError(t, b.Close()) }()

	// A queue of the test's own, so that nothing else consumes from it.
	raw := amqpChannel(t)
	require.NoError(t, raw.ExchangeDeclare(bound, "fanout", true, false, false, false, nil))
	q, err := raw.QueueDeclare("", false, true, true, false, nil)
	require.NoError(t, err)
	require.NoError(t, raw.QueueBind(q.Name, "", bound, false, nil))
	deliveries, err := raw.Consume(q.Name, "", true, true, false, false, nil)
	require.NoError(t, err)

	// 16 goroutines, each publishing one message at a time, so that channels
	// are taken up again while others are in use.
	const workers, n = 16, 400
	sent := newMessages(n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				topic := bound
				if i%3 == 1 {
					topic = unbound
				}
				errs[i] = b.Publisher().Publish(topic, sent[i].message())
			}
		}()
	}
	wg.Wait()
	want := map[string]bool{}
	for i, err := range errs {
		if i%3 != 1 {
			assert.NoError(t, err, "message %d to the bound exchange", i)
			want[sent[i].uuid] = true
		} else if assert.Error(t, err, "message %d to the unbound exchange", i) {
			assert.Contains(t, err.Error(), "message "+sent[i].uuid+" to exchange \""+unbound+"\" was returned unroutable")
		}
	}
	for len(want) > 0 {
		select {
		case d := <-deliveries:
			assert.True(t, want[d.MessageId], "unexpected message %s", d.MessageId)
			delete(want, d.MessageId)
		case <-time.After(patience):
			t.Fatalf("%d messages never arrived", len(want))
		}
	}
}

// TestAMQPBrokenConnection runs the publisher through a TCP proxy to
// RabbitMQ. A publish whose confirm is held back when the connection breaks
// fails (it is not reported as delivered); the next one dials again and
// succeeds; with nothing listening, Publish fails within the dial timeout.
func TestAMQPBrokenConnection(t *testing.T) {
	t.Parallel()
	topic := "entoutbox.broken." + randomSuffix()
	amqpSetup(t, topic)
	u, err := url.Parse(amqpURL)
	require.NoError(t, err)
	proxy := startProxy(t, u.Host)
	u.Host = proxy.addr()

	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	b, err := Open(ctx, u.String(), Options{})
	require.NoError(t, err)
	defer b.Close()
	raw := amqpChannel(t) // straight to RabbitMQ
	require.NoError(t, raw.ExchangeDeclare(topic, "fanout", true, false, false, false, nil))
	q, err := raw.QueueDeclare("", false, true, true, false, nil)
	require.NoError(t, err)
	require.NoError(t, raw.QueueBind(q.Name, "", topic, false, nil))
	deliveries, err := raw.Consume(q.Name, "", true, true, false, false, nil)
	require.NoError(t, err)

	sent := newMessages(3)
	require.NoError(t, b.Publisher().Publish(topic, sent[0].message()))

	proxy.hold(true) // RabbitMQ's confirm does not come through
	done := make(chan error, 1)
	go func() { done <- b.Publisher().Publish(topic, sent[1].message()) }()
	select {
	case err := <-done:
		t.Fatalf("Publish returned %v without its confirm", err)
	case <-time.After(300 * time.Millisecond):
	}
	proxy.cut()
	select {
	case err := <-done:
		require.Error(t, err, "a publish cut off before its confirm must fail")
		t.Log(err)
	case <-time.After(patience):
		t.Fatal("Publish hangs after the connection broke")
	}

	proxy.hold(false)
	require.NoError(t, b.Publisher().Publish(topic, sent[2].message()), "Publish dials again")
	got := map[string]bool{}
	for !got[sent[0].uuid] || !got[sent[2].uuid] {
		select {
		case d := <-deliveries:
			got[d.MessageId] = true
		case <-time.After(patience):
			t.Fatalf("received %v, want %s and %s", got, sent[0].uuid, sent[2].uuid)
		}
	}

	// Nothing listens any more: each Publish fails (the first one perhaps on
	// the connection that is going down), then dialing fails.
	proxy.close()
	for attempt := 1; ; attempt++ {
		start := time.Now()
		err = b.Publisher().Publish(topic, newMessages(1)[0].message())
		require.Error(t, err)
		require.Less(t, time.Since(start), 2*connectTimeout, "a publish to a broker that is gone waits out its connect timeout at most")
		if strings.HasPrefix(err.Error(), "broker: amqp: connecting: ") {
			break
		}
		require.Less(t, attempt, 3, "%v", err)
		time.Sleep(100 * time.Millisecond)
	}
}

// tcpProxy forwards connections to a server; it can hold back what the
// server sends and cut every connection.
type tcpProxy struct {
	ln     net.Listener
	target string
	held   atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func startProxy(t *testing.T, target string) *tcpProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &tcpProxy{ln: ln, target: target}
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
			go func() { _, _ = io.Copy(s, c) }()
			go p.forward(c, s)
		}
	}()
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) hold(on bool) { p.held.Store(on) }

// forward copies what the server sends to the client, waiting while held.
func (p *tcpProxy) forward(client, server net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		for p.held.Load() {
			time.Sleep(10 * time.Millisecond)
		}
		if n > 0 {
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = client.Close()
			return
		}
	}
}

func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *tcpProxy) close() {
	_ = p.ln.Close()
	p.cut()
}

// A group subscribing to a topic whose exchange does not exist yet (no
// producer has published there: a topic prefix that differs from the
// relay's, say) is told so once; a topic already published on is not.
func TestAMQPSubscriberSaysWhenNoOneHasPublished(t *testing.T) {
	t.Parallel()
	lonely, busy := "entoutbox.lonely."+randomSuffix(), "entoutbox.busy."+randomSuffix()
	rawURL := amqpSetup(t, lonely)
	amqpSetup(t, busy)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	log := &recordingLogger{}
	b, err := Open(ctx, rawURL, Options{Logger: log})
	require.NoError(t, err)
	defer b.Close()
	// Unroutable, since no queue is bound yet, but it declares the exchange.
	_ = b.Publisher().Publish(busy, message.NewMessage(watermill.NewUUID(), []byte("x")))

	for _, group := range []string{"g1", "g2"} {
		sub, err := b.Subscriber(group)
		require.NoError(t, err)
		_, err = sub.Subscribe(ctx, lonely)
		require.NoError(t, err)
		_, err = sub.Subscribe(ctx, busy)
		require.NoError(t, err)
		amqpQueues.add(lonely, lonely+"_"+group)
		amqpQueues.add(busy, busy+"_"+group)
		require.NoError(t, sub.Close())
	}
	said := log.find("No producer has published on this topic yet")
	require.Len(t, said, 1, "said once, for the topic without an exchange: %v", log.infos)
	require.Contains(t, said[0], lonely)
	require.Contains(t, said[0], "consumer.WithTopicPrefix")
	require.NotContains(t, said[0], busy)
}

// A Broker whose RabbitMQ went away closes, with a subscription still
// running on a live context: watermill-amqp's subscriber waits for its
// reconnection, which only the connection's close ends, so Close closes
// the shared connection under it after subscriberCloseGrace.
func TestAMQPCloseReturnsWhileTheServerIsUnreachable(t *testing.T) {
	topic := amqpSetup(t, "close_unreachable_"+watermill.NewShortUUID())
	u, err := url.Parse(amqpURL)
	require.NoError(t, err)
	proxy := tcpproxy.Start(t, u.Host)
	u.Host = proxy.Addr
	saved := subscriberCloseGrace
	subscriberCloseGrace = time.Second
	t.Cleanup(func() { subscriberCloseGrace = saved })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := Open(ctx, u.String(), Options{})
	require.NoError(t, err)
	sub, err := b.Subscriber("billing")
	require.NoError(t, err)
	_, err = sub.Subscribe(context.Background(), topic) // a context that never ends
	require.NoError(t, err)
	proxy.Cut()
	time.Sleep(3 * time.Second) // the subscriber sees its connection gone, and reconnects

	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case <-closed: // an error saying the subscribers were closed under them, or none
	case <-time.After(time.Minute): // a liveness bound
		t.Fatal("Close did not return within a minute of RabbitMQ going away")
	}
}
