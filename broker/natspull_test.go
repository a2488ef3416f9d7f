package broker

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
)

// natsOpen opens the broker at rawURL for the test.
func natsOpen(ctx context.Context, t testing.TB, rawURL string) Broker {
	t.Helper()
	b, err := Open(ctx, rawURL, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// natsStart begins a NATS test: a topic of its own named for what it
// tests, its stream deleted at the end, a context bounded by patience
// (cancelled first at the end) and the broker opened with query.
func natsStart(t *testing.T, what, query string) (context.Context, Broker, string) {
	t.Helper()
	topic := "entoutbox." + what + "." + randomSuffix()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	b := natsOpen(ctx, t, natsSetup(t, topic)+query)
	t.Cleanup(cancel)
	return ctx, b, topic
}

// natsPublished is natsStart with n messages published on the topic.
func natsPublished(t *testing.T, what, query string, n int) (context.Context, Broker, string, []sentMessage) {
	t.Helper()
	ctx, b, topic := natsStart(t, what, query)
	sent := newMessages(n)
	publish(t, b, topic, sent)
	return ctx, b, topic, sent
}

// requireRedelivered takes the next message from ch, acks it and asserts
// it is held, delivered a second time.
func requireRedelivered(ctx context.Context, t *testing.T, ch <-chan *message.Message, held *message.Message) {
	t.Helper()
	again := take(ctx, t, ch, 1)[0]
	again.Ack()
	assert.Equal(t, held.UUID, again.UUID)
	assert.Equal(t, "2", again.Metadata.Get(events.MetaDeliveryCount))
}

// natsMember subscribes a new member of group to topic.
func natsMember(ctx context.Context, t *testing.T, b Broker, group, topic string) (message.Subscriber, <-chan *message.Message) {
	t.Helper()
	sub, err := b.Subscriber(group)
	require.NoError(t, err)
	ch, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	return sub, ch
}

// take receives n messages from ch without acking them.
func take(ctx context.Context, t *testing.T, ch <-chan *message.Message, n int) []*message.Message {
	t.Helper()
	return collect(ctx, t, ch, n, false)
}

// assertNoneFor checks nothing arrives on ch for a while, without acking
// what does.
func assertNoneFor(t *testing.T, ch <-chan *message.Message, wait time.Duration, why string) {
	t.Helper()
	select {
	case m := <-ch:
		t.Errorf("%s: got message %s (%s)", why, m.UUID, m.Payload)
	case <-time.After(wait):
	}
}

// natsConsumerState is the group's pull consumer as the server sees it.
func natsConsumerState(ctx context.Context, t testing.TB, group, topic string) *jetstream.ConsumerInfo {
	t.Helper()
	cons, err := natsJS(t).Consumer(ctx, natsName(topic), natsConsumerName(group, topic))
	require.NoError(t, err)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	return info
}

// natsAckPending waits until the server counts want messages delivered
// and not acked (acks reach it asynchronously), for up to patience, and
// returns the consumer's state then, or the last one read.
func natsAckPending(ctx context.Context, t testing.TB, group, topic string, want int) *jetstream.ConsumerInfo {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info := natsConsumerState(ctx, t, group, topic)
		if info.NumAckPending == want || time.Now().After(deadline) {
			return info
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A subscription hands out up to max_in_flight messages without waiting
// for any ack, asks the server for no more than that, and goes on as they
// are acked; a nacked one comes again, counted.
func TestNATSManyInFlight(t *testing.T) {
	t.Parallel()
	ctx, b, topic, sent := natsPublished(t, "inflight", "?max_in_flight=50", 120)
	_, ch := natsMember(ctx, t, b, "g", topic)

	held := take(ctx, t, ch, 50)
	assertNoneFor(t, ch, time.Second, "a 51st message while 50 are held")
	info := natsAckPending(ctx, t, "g", topic, 50)
	assert.Equal(t, 50, info.NumAckPending, "delivered and not acked")
	assert.EqualValues(t, 70, info.NumPending, "the rest wait on the server, not in the subscriber")
	for _, m := range held {
		assert.Equal(t, "1", m.Metadata.Get(events.MetaDeliveryCount), "delivery count of %s", m.UUID)
	}

	got := map[string]int{}
	var again *message.Message
	count := func(m *message.Message) {
		if got[m.UUID]++; got[m.UUID] > 1 {
			again = m
		}
	}
	for _, m := range held {
		count(m)
	}
	for _, m := range held[:10] {
		m.Ack()
	}
	nacked := held[10]
	nacked.Nack()
	more := take(ctx, t, ch, 11)
	for _, m := range more {
		count(m)
	}
	held = append(held[11:], more...)
	assertNoneFor(t, ch, time.Second, "more than 50 held")
	// The acks are asynchronous: the server counts them a moment after
	// the subscriber took the next messages. More than 50 held stays.
	info = natsAckPending(ctx, t, "g", topic, 50)
	// The server may still count the nacked message's first delivery for a
	// while (seen on a loaded machine): at most one over the window.
	assert.LessOrEqual(t, info.NumAckPending, 51, "delivered and not acked, once the acks arrived")

	for _, m := range held {
		m.Ack()
	}
	for len(got) < len(sent) || again == nil {
		m := take(ctx, t, ch, 1)[0]
		count(m)
		m.Ack()
	}
	require.NotNil(t, again, "the nacked message came again")
	assert.Equal(t, nacked.UUID, again.UUID, "the one delivered twice")
	assert.Equal(t, "2", again.Metadata.Get(events.MetaDeliveryCount), "its second delivery")
	for _, m := range sent {
		want := 1
		if m.uuid == nacked.UUID {
			want = 2
		}
		assert.Equal(t, want, got[m.uuid], "deliveries of %s", m.uuid)
	}
}

// However long a handler takes, a message held by a live member is not
// delivered again: with a 1 s ack wait and every message held 2 to 3 s,
// ten at a time, each of 30 arrives once. The acks come one by one, so a
// subscriber asking for more messages than it has room for would have
// some it cannot take.
func TestNATSNoRedeliveryAtAnySpeed(t *testing.T) {
	t.Parallel()
	ctx, b, topic, sent := natsPublished(t, "slow", "?ack_wait=1s&max_in_flight=10", 30)
	_, ch := natsMember(ctx, t, b, "g", topic)

	deliveries := newSyncLists()
	var handlers sync.WaitGroup
	distinct := map[string]bool{}
	for len(distinct) < len(sent) {
		m := take(ctx, t, ch, 1)[0]
		distinct[m.UUID] = true
		deliveries.add(m.UUID, m.Metadata.Get(events.MetaDeliveryCount))
		handling := 2*time.Second + time.Duration(len(distinct)%10)*100*time.Millisecond
		handlers.Add(1)
		go func() {
			defer handlers.Done()
			time.Sleep(handling)
			m.Ack()
		}()
	}
	handlers.Wait()
	assertNoneFor(t, ch, 3*time.Second, "past the ack wait, a message delivered again")
	for _, m := range sent {
		assert.Equal(t, []string{"1"}, deliveries.get(m.uuid), "deliveries of %s (their delivery counts)", m.uuid)
	}
}

// natsMemberOf is the NATS subscriber behind a Broker's.
func natsMemberOf(sub message.Subscriber) *natsSubscriber {
	return sub.(concurrentPartitionSubscriber).Subscriber.(*natsSubscriber)
}

// Closing a member hands what it holds to the group's other members at
// once, long before the ack wait (1 h here): the messages it received and
// had not handed out, and those whose handlers nack when their context is
// cancelled. One acked while it closes is acked. Close does not wait for
// a handler that never answers here (see the next test).
func TestNATSCloseHandsMessagesToOtherMembers(t *testing.T) {
	t.Parallel()
	ctx, b, topic, sent := natsPublished(t, "close", "?ack_wait=1h&max_in_flight=4", 4)
	first, ch := natsMember(ctx, t, b, "g", topic)
	natsMemberOf(first).closeWait = time.Hour
	out := take(ctx, t, ch, 2) // the other two stay in the subscriber
	require.Eventually(t, func() bool { return natsConsumerState(ctx, t, "g", topic).NumAckPending == 4 },
		patience, 20*time.Millisecond, "the first member holds all four")
	nacks, acks := out[0], out[1]
	go func() { <-nacks.Context().Done(); nacks.Nack() }()
	go func() { <-acks.Context().Done(); acks.Ack() }()
	_, other := natsMember(ctx, t, b, "g", topic)
	assertNoneFor(t, other, 300*time.Millisecond, "the other member, while the first holds everything")

	closed := make(chan error, 1)
	go func() { closed <- first.Close() }()
	got := take(ctx, t, other, 3)
	for _, m := range got {
		assert.Equal(t, "2", m.Metadata.Get(events.MetaDeliveryCount), "delivery count of %s", m.UUID)
		m.Ack()
	}
	assertNoneFor(t, other, 500*time.Millisecond, "the one acked while closing")
	assertSameIgnoringCount(t, slices.DeleteFunc(slices.Clone(sent), func(m sentMessage) bool { return m.uuid == acks.UUID }), got)
	require.NoError(t, <-closed)
}

// A handler that neither acks nor nacks when its context is cancelled is
// given natsCloseWait; then Close naks its message, for another member.
func TestNATSCloseNaksWhatAHandlerKeeps(t *testing.T) {
	t.Parallel()
	ctx, b, topic, _ := natsPublished(t, "keeps", "?ack_wait=1h", 1)
	first, ch := natsMember(ctx, t, b, "g", topic)
	kept := take(ctx, t, ch, 1)[0]
	_, other := natsMember(ctx, t, b, "g", topic)
	require.NoError(t, first.Close())
	requireRedelivered(ctx, t, other, kept)
}

// assertSameIgnoringCount is assertSame for messages delivered again.
func assertSameIgnoringCount(t *testing.T, want []sentMessage, got []*message.Message) {
	t.Helper()
	for _, m := range got {
		m.Metadata.Set(events.MetaDeliveryCount, "1")
	}
	assertSame(t, want, got, false)
}

// A member that is gone (its connection lost) no longer says its messages
// are in progress: they come again after the ack wait, to another member.
func TestNATSRedeliversWhatALostMemberHeld(t *testing.T) {
	t.Parallel()
	ctx, b, topic, _ := natsPublished(t, "lost", "?ack_wait=1s", 1)
	lost, ch := natsMember(ctx, t, b, "g", topic)
	held := take(ctx, t, ch, 1)[0]
	natsMemberOf(lost).nc.Close()
	_, other := natsMember(ctx, t, b, "g", topic)
	requireRedelivered(ctx, t, other, held)
	held.Nack() // lets the lost member's Close return at once
}

// A group of an earlier version has a durable push consumer. Its members
// subscribing now, several at once, replace it with the pull consumer,
// starting after its ack floor: every message it had not acked comes, once
// across the group, and none before the floor; one acked above the floor
// comes again (consumers dedupe it).
func TestNATSReplacesAnEarlierPushConsumer(t *testing.T) {
	t.Parallel()
	group := "g-" + randomSuffix()
	ctx, b, topic, sent := natsPublished(t, "migrate", "?partitions=0", 10) // earlier versions made whole streams

	js := natsJS(t)
	stream, push := natsName(topic), natsPushConsumerName(group, topic)
	natsEarlierPushConsumer(ctx, t, js, group, topic, len(sent), 0, 1, 2, 3, 5)

	var wg sync.WaitGroup
	chans := make([]<-chan *message.Message, 4)
	errs := make([]error, len(chans))
	for i := range chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub, err := b.Subscriber(group)
			if err == nil {
				chans[i], err = sub.Subscribe(ctx, topic)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	group4 := merge(chans...)
	assertSame(t, sent[4:], receive(ctx, t, group4, 6), false)
	assertNothingMore(t, group4, time.Second)

	_, err := js.PushConsumer(ctx, stream, push)
	assert.ErrorIs(t, err, jetstream.ErrConsumerNotFound, "the push consumer is gone")
	st, err := js.Stream(ctx, stream)
	require.NoError(t, err)
	names := st.ConsumerNames(ctx)
	var all []string
	for name := range names.Name() {
		all = append(all, name)
	}
	assert.Equal(t, []string{natsConsumerName(group, topic)}, all, "one pull consumer for the group")
}

// natsEarlierPushConsumer makes group's durable push consumer of topic as
// earlier versions did, and acks the messages at the given indexes of the
// n published.
func natsEarlierPushConsumer(ctx context.Context, t *testing.T, js jetstream.JetStream, group, topic string, n int, acked ...int) {
	t.Helper()
	stream, push := natsName(topic), natsPushConsumerName(group, topic)
	deliver := "_INBOX.entoutbox." + stream + "." + push
	_, err := js.CreateOrUpdatePushConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: push, DeliverSubject: deliver, DeliverGroup: natsName(group), DeliverPolicy: jetstream.DeliverAllPolicy,
		FilterSubject: topic, AckPolicy: jetstream.AckExplicitPolicy, AckWait: natsAckWait, MaxAckPending: 1000,
	})
	require.NoError(t, err)
	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	defer nc.Close()
	member, err := nc.QueueSubscribeSync(deliver, natsName(group))
	require.NoError(t, err)
	for i := range n {
		nm, err := member.NextMsg(patience)
		require.NoError(t, err)
		if slices.Contains(acked, i) {
			require.NoError(t, nm.AckSync())
		}
	}
	require.NoError(t, member.Unsubscribe())
}

// racingJetStream makes a pull consumer (rival) just before each
// CreateConsumer, as another member of the group replacing the same push
// consumer may.
type racingJetStream struct {
	jetstream.JetStream
	rival jetstream.ConsumerConfig
}

func (r racingJetStream) CreateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	if _, err := r.JetStream.CreateConsumer(ctx, stream, r.rival); err != nil {
		return nil, err
	}
	return r.JetStream.CreateConsumer(ctx, stream, cfg)
}

// Two members replacing a push consumer may read two ack floors (its
// members of the earlier version still acking): the one that creates the
// pull consumer second joins the first one's, which starts no later.
func TestNATSJoinsThePullConsumerAnotherMemberMade(t *testing.T) {
	t.Parallel()
	ctx, b, topic, sent := natsPublished(t, "race", "?partitions=0", 6) // earlier versions made whole streams
	js := natsJS(t)
	natsEarlierPushConsumer(ctx, t, js, "g", topic, len(sent), 0, 1, 2, 3) // ack floor 4

	rival := jetstream.ConsumerConfig{
		Durable: natsConsumerName("g", topic), DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   3, // it read the floor when 1 and 2 were acked
		FilterSubject: topic, AckPolicy: jetstream.AckExplicitPolicy, AckWait: natsAckWait, MaxAckPending: natsMaxAckPending,
	}
	topo := &natsTopology{ackWait: natsAckWait, maxAckPending: natsMaxAckPending, logger: watermill.NopLogger{}}
	name, err := topo.ensureConsumer(ctx, racingJetStream{js, rival}, natsStream{name: natsName(topic)}, topic, "g")
	require.NoError(t, err)
	require.Equal(t, rival.Durable, name)

	_, ch := natsMember(ctx, t, b, "g", topic)
	assertSame(t, sent[2:], receive(ctx, t, ch, 4), true)
	_, err = js.PushConsumer(ctx, natsName(topic), natsPushConsumerName("g", topic))
	assert.ErrorIs(t, err, jetstream.ErrConsumerNotFound, "the push consumer is gone")
}

// An empty message with a Status header of its own is a message, not a
// status of the pull protocol: it is delivered.
func TestNATSDeliversAMessageThatLooksLikeAStatus(t *testing.T) {
	t.Parallel()
	ctx, b, topic := natsStart(t, "status", "")
	sent := []sentMessage{{uuid: watermill.NewUUID(), metadata: map[string]string{"Status": "408", "Description": "Request Timeout"}}}
	publish(t, b, topic, sent)
	_, ch := natsMember(ctx, t, b, "g", topic)
	assertSame(t, sent, receive(ctx, t, ch, 1), false)
}

// natsDeliveryCount reads what nats.go's Msg.Metadata reads, in both
// forms of the ack subject, and nothing off other subjects.
func TestNATSDeliveryCount(t *testing.T) {
	for _, reply := range []string{
		"$JS.ACK.orders.g_pull.3.120.118.1733100000000000000.5",
		"$JS.ACK._.acchash.orders.g_pull.17.120.118.1733100000000000000.0.tok",
		"$JS.ACK.hub.acchash.orders.g_pull.1.120.118.1733100000000000000.0",
	} {
		md, err := (&nats.Msg{Reply: reply, Sub: &nats.Subscription{}}).Metadata()
		require.NoError(t, err, reply)
		n, ok := natsDeliveryCount(reply)
		require.True(t, ok, reply)
		assert.Equal(t, strconv.FormatUint(md.NumDelivered, 10), n, reply)
	}
	for _, reply := range []string{"", "_INBOX.abc", "$JS.ACK.orders.g_pull.3.120", "$JS.ACK.orders.g_pull.x.120.118.1.5",
		"$JS.ACK.orders.g_pull..120.118.1.5"} {
		_, ok := natsDeliveryCount(reply)
		assert.False(t, ok, reply)
	}
}

// natsProxy forwards connections to the test server; while frozen, what
// the server sends does not reach the clients (as on a link that died
// without a word).
func natsProxy(t *testing.T) (rawURL string, freeze, thaw func()) {
	t.Helper()
	server, err := url.Parse(natsURL)
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var gate sync.RWMutex
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			upstream, err := net.Dial("tcp", server.Host)
			if err != nil {
				_ = client.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, client, upstream)
			mu.Unlock()
			go func() { _, _ = io.Copy(upstream, client) }()
			go func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := upstream.Read(buf)
					if err != nil {
						_ = client.Close()
						return
					}
					gate.RLock()
					_, err = client.Write(buf[:n])
					gate.RUnlock()
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return "nats://" + l.Addr().String(), gate.Lock, gate.Unlock
}

// Acks are sent without waiting for the server's answer, but not
// forgotten: one the server may not have received (its answer to the
// flush after it does not come) is logged with its message's UUID, as
// a message that may come again.
func TestNATSLogsAnAckTheServerMayNotHaveReceived(t *testing.T) {
	t.Parallel()
	topic := "entoutbox.unconfirmed." + randomSuffix()
	natsSetup(t, topic)
	rawURL, freeze, thaw := natsProxy(t)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	log := &recordingLogger{}
	b, err := Open(ctx, rawURL, Options{Logger: log})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	publish(t, b, topic, newMessages(2))
	sub, ch := natsMember(ctx, t, b, "g", topic)
	natsMemberOf(sub).confirmWait = 300 * time.Millisecond
	got := take(ctx, t, ch, 2)

	got[0].Ack()
	assertNoneFor(t, ch, time.Second, "a message after both were taken")
	require.Empty(t, log.findError("acks"), "the server answered the flush after the first ack")
	freeze()
	got[1].Ack()
	require.Eventually(t, func() bool { return len(log.findError(got[1].UUID)) > 0 }, 30*time.Second, 20*time.Millisecond,
		"the second ack, unconfirmed, is logged")
	logged := log.findError(got[1].UUID)[0]
	assert.Contains(t, logged, "may come again")
	assert.NotContains(t, logged, got[0].UUID)
	thaw()
	require.NoError(t, sub.Close())
}
