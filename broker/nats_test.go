package broker

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
)

// natsJS connects to the test server's JetStream for checks and
// clean-up.
func natsJS(t testing.TB) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// natsSetup deletes the stream the test's topic gets.
func natsSetup(t testing.TB, topic string) string {
	need(t, "NATS", natsURL)
	js := natsJS(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		if err := js.DeleteStream(ctx, natsName(topic)); err != nil {
			t.Logf("deleting stream %s: %v", natsName(topic), err)
		}
	})
	return natsURL
}

// natsChecks checks JetStream stored each message with Nats-Msg-Id = UUID.
func natsChecks(ctx context.Context, t *testing.T, _, topic, _ string) func([]sentMessage) {
	js := natsJS(t)
	return func(sent []sentMessage) {
		stream, err := js.Stream(ctx, natsName(topic))
		require.NoError(t, err)
		for i, m := range sent {
			raw, err := stream.GetMsg(ctx, uint64(i+1))
			require.NoError(t, err)
			assert.Equal(t, m.uuid, raw.Header.Get(nats.MsgIdHdr), "Nats-Msg-Id of message %d", i)
		}
	}
}

// TestNATSDeduplicates: JetStream drops a message whose Nats-Msg-Id it
// stored within its duplicate window. A message sent again under the same
// publish id (the relay sending a row again after a crash) is stored once
// and both publishes succeed; the same event under another publish id (a
// retry's new row, a replay) is stored again; a message known by its UUID
// alone, dropped as a duplicate, is an error, never a silent success. Sync
// and async publishes alike.
func TestNATSDeduplicates(t *testing.T) {
	t.Parallel()
	topic := "entoutbox.dedupe." + randomSuffix()
	rawURL := natsSetup(t, topic)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	b, err := Open(ctx, rawURL, Options{})
	require.NoError(t, err)
	defer b.Close()
	pub := b.Publisher()
	async := pub.(AsyncPublisher)
	publishAsync := func(msg *message.Message) error {
		done := make(chan error, 1)
		async.PublishAsync(topic, msg, func(err error) { done <- err })
		return <-done
	}
	event := watermill.NewUUID()
	msg := func(publishID string) *message.Message {
		m := message.NewMessage(event, []byte(`{"a":1}`))
		if publishID != "" {
			m.Metadata.Set(events.MetaPublishID, publishID)
		}
		return m
	}

	require.NoError(t, pub.Publish(topic, msg(event+"/1")))
	require.NoError(t, pub.Publish(topic, msg(event+"/1")), "the same row again: stored before, delivered")
	require.NoError(t, publishAsync(msg(event+"/1")), "the same row again: stored before, delivered")
	require.NoError(t, pub.Publish(topic, msg(event+"/2")), "a retry's row: stored")
	require.NoError(t, publishAsync(msg(event+"/replay-1")), "a replay: stored")

	var dup *DuplicateError
	err = pub.Publish(topic, msg(""), message.NewMessage(watermill.NewUUID(), []byte(`{"a":2}`)))
	require.NoError(t, err, "the first message with this UUID alone is stored")
	err = pub.Publish(topic, msg(""))
	require.ErrorAs(t, err, &dup, "dropped as a duplicate of another message: not delivered")
	require.Equal(t, event, dup.UUID)
	require.Contains(t, err.Error(), "did not store message "+event)
	require.ErrorAs(t, publishAsync(msg("")), &dup)

	stream, err := natsJS(t).Stream(ctx, natsName(topic))
	require.NoError(t, err)
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 5, info.State.Msgs, "rows 1 and 2, the replay, the UUID-only message and the other one")
	for seq, want := range map[uint64]string{1: event + "/1", 2: event + "/2", 3: event + "/replay-1", 4: event} {
		raw, err := stream.GetMsg(ctx, seq)
		require.NoError(t, err)
		require.Equal(t, want, raw.Header.Get(nats.MsgIdHdr), "Nats-Msg-Id of stream message %d", seq)
		require.Equal(t, event, raw.Header.Get(wmnats.WatermillUUIDHdr), "the event id of stream message %d", seq)
	}
}

// TestNATSGroupShares checks two members of a group split the messages and
// another group gets them all.
func TestNATSGroupShares(t *testing.T) {
	t.Parallel()
	topic := "entoutbox.share." + randomSuffix()
	testGroupShares(t, natsSetup(t, topic), topic)
}

func TestNATSMarshalerRefusesLossyMetadata(t *testing.T) {
	for _, md := range []map[string]string{
		{"k": " padded"},
		{"k": "two\nlines"},
		{"bad:key": "v"},
		{"": "v"},
		{"Nats-Msg-Id": "x"},
	} {
		msg := message.NewMessage(watermill.NewUUID(), nil)
		msg.Metadata = md
		_, err := natsMarshaler{}.Marshal("t", msg)
		assert.Error(t, err, "%q", md)
	}
	msg := message.NewMessage("id-1", []byte("p"))
	msg.Metadata.Set("k", "v w")
	nm, err := natsMarshaler{}.Marshal("t", msg)
	require.NoError(t, err)
	assert.Equal(t, "id-1", nm.Header.Get(nats.MsgIdHdr))
	back, err := natsMarshaler{}.Unmarshal(nm)
	require.NoError(t, err)
	assert.Equal(t, "id-1", back.UUID)
	assert.Equal(t, map[string]string{"k": "v w"}, map[string]string(back.Metadata))
}

func TestNATSName(t *testing.T) {
	assert.Equal(t, "orders", natsName("orders"))
	assert.Equal(t, "g-1_x", natsName("g-1_x"))
	dotted := natsName("orders.created")
	assert.Regexp(t, `^orders_created_[0-9a-f]{8}$`, dotted)
	assert.NotEqual(t, natsName("orders_created"), dotted)
	assert.NotEqual(t, natsName("a b"), natsName("a*b"))
	assert.LessOrEqual(t, len(natsName(string(make([]byte, 500)))), natsNameMax+9)
	assert.NotEmpty(t, natsName(""))
}

func TestNATSParams(t *testing.T) {
	for _, c := range []struct {
		raw     string
		want    natsParams
		connect string
	}{
		{"nats://h:4222", natsParams{30 * time.Second, 1000, 128, 16}, "nats://h:4222"},
		{"nats://h:4222?ack_wait=5s", natsParams{5 * time.Second, 1000, 128, 16}, "nats://h:4222"},
		{"nats://h:4222?ack_wait=10ms", natsParams{10 * time.Millisecond, 1000, 128, 16}, "nats://h:4222"},
		{"nats://h:4222?ack_wait=5s&max_ack_pending=8", natsParams{5 * time.Second, 8, 128, 16}, "nats://h:4222"},
		{"nats://h:4222?max_ack_pending=5000&name=x", natsParams{30 * time.Second, 5000, 128, 16}, "nats://h:4222?name=x"},
		{"nats://h:4222?max_in_flight=7&name=x", natsParams{30 * time.Second, 1000, 7, 16}, "nats://h:4222?name=x"},
		{"nats://h:4222?partitions=0", natsParams{30 * time.Second, 1000, 128, 0}, "nats://h:4222"},
		{"nats://h:4222?partitions=4&name=x", natsParams{30 * time.Second, 1000, 128, 4}, "nats://h:4222?name=x"},
	} {
		u, err := url.Parse(c.raw)
		require.NoError(t, err)
		got, connect, err := natsParamsOf(u, c.raw)
		require.NoError(t, err, c.raw)
		assert.Equal(t, c.want, got, c.raw)
		assert.Equal(t, c.connect, connect, c.raw)
	}
	for _, raw := range []string{"nats://h?ack_wait=0s", "nats://h?ack_wait=x", "nats://h?max_ack_pending=0", "nats://h?max_ack_pending=-3",
		"nats://h?max_ack_pending=many", "nats://h?max_in_flight=0", "nats://h?max_in_flight=x",
		"nats://h?partitions=-1", "nats://h?partitions=x", "nats://h?partitions=257"} {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		_, _, err = natsParamsOf(u, raw)
		assert.Error(t, err, raw)
	}
}

// The group's bound on messages delivered and not yet acked and its ack
// wait reach its JetStream pull consumer, and the subscriber says how many
// messages it holds at once.
func TestNATSMaxAckPendingOnTheConsumer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		query       string
		want        int
		maxInFlight int
	}{{"?ack_wait=5s", 1000, 128}, {"?ack_wait=5s&max_ack_pending=7&max_in_flight=3", 7, 3}} {
		topic := "entoutbox.pending." + randomSuffix()
		rawURL := natsSetup(t, topic) + c.query
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		b, err := Open(ctx, rawURL, Options{})
		require.NoError(t, err)
		defer b.Close()
		sub, err := b.Subscriber("g")
		require.NoError(t, err)
		require.Implements(t, (*ConcurrentSubscriber)(nil), sub)
		assert.Equal(t, c.maxInFlight, sub.(ConcurrentSubscriber).MaxInFlight(), c.query)
		_, err = sub.Subscribe(ctx, topic)
		require.NoError(t, err)
		cons, err := natsJS(t).Consumer(ctx, natsName(topic), natsConsumerName("g", topic))
		require.NoError(t, err)
		assert.Equal(t, c.want, cons.CachedInfo().Config.MaxAckPending, c.query)
		assert.Equal(t, 5*time.Second, cons.CachedInfo().Config.AckWait, c.query)
		require.NoError(t, sub.Close())

		// The last URL to subscribe the group sets them.
		b2, err := Open(ctx, natsURL+"?ack_wait=6s&max_ack_pending=9", Options{})
		require.NoError(t, err)
		defer b2.Close()
		sub, err = b2.Subscriber("g")
		require.NoError(t, err)
		_, err = sub.Subscribe(ctx, topic)
		require.NoError(t, err)
		cons, err = natsJS(t).Consumer(ctx, natsName(topic), natsConsumerName("g", topic))
		require.NoError(t, err)
		assert.Equal(t, 9, cons.CachedInfo().Config.MaxAckPending, c.query)
		assert.Equal(t, 6*time.Second, cons.CachedInfo().Config.AckWait, c.query)
	}
}

// A header key sent twice (by any producer: NATS allows it) is delivered
// with its first value and the reason under metaMalformed, instead of
// failing in the module's subscriber, which neither acks nor nacks it.
func TestNATSUnmarshalRepeatedHeader(t *testing.T) {
	nm := nats.NewMsg("t")
	nm.Data = []byte("p")
	nm.Header.Set(wmnats.WatermillUUIDHdr, "id-1")
	nm.Header.Set(nats.MsgIdHdr, "id-1")
	nm.Header.Add("trace", "a")
	nm.Header.Add("trace", "b")
	nm.Header.Set("k", "v")
	msg, err := natsMarshaler{}.Unmarshal(nm)
	require.NoError(t, err)
	assert.Equal(t, "id-1", msg.UUID)
	assert.Equal(t, "a", msg.Metadata.Get("trace"))
	assert.Equal(t, "v", msg.Metadata.Get("k"))
	assert.Equal(t, `NATS header repeated, one value per key expected: "trace" 2 times (values ["a" "b"]); the first value of each is kept`,
		msg.Metadata.Get(metaMalformed))
	assert.Len(t, msg.Metadata, 3)
}

// recordingLogger keeps the Info and Error messages logged.
type recordingLogger struct {
	watermill.NopLogger
	mu     sync.Mutex
	infos  []string
	errors []string
}

func (l *recordingLogger) Info(msg string, fields watermill.LogFields) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.infos = append(l.infos, fmt.Sprintf("%s %v", msg, fields))
}

func (l *recordingLogger) Error(msg string, err error, fields watermill.LogFields) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errors = append(l.errors, fmt.Sprintf("%s: %v %v", msg, err, fields))
}

func (l *recordingLogger) With(watermill.LogFields) watermill.LoggerAdapter { return l }

func (l *recordingLogger) find(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return matching(l.infos, s)
}

func (l *recordingLogger) findError(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return matching(l.errors, s)
}

func matching(logged []string, s string) []string {
	var out []string
	for _, m := range logged {
		if strings.Contains(m, s) {
			out = append(out, m)
		}
	}
	return out
}

// A consumer subscribing to a topic no one has published on (its topic
// prefix differs from the relay's, say) is told so, once; one subscribing
// to a topic with messages is not.
func TestNATSSubscriberSaysWhenNoOneHasPublished(t *testing.T) {
	t.Parallel()
	lonely, busy := "entoutbox.lonely."+randomSuffix(), "entoutbox.busy."+randomSuffix()
	rawURL := natsSetup(t, lonely)
	natsSetup(t, busy)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	log := &recordingLogger{}
	b, err := Open(ctx, rawURL, Options{Logger: log})
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.Publisher().Publish(busy, message.NewMessage(watermill.NewUUID(), []byte("x"))))

	for _, group := range []string{"g1", "g2"} {
		sub, err := b.Subscriber(group)
		require.NoError(t, err)
		_, err = sub.Subscribe(ctx, lonely)
		require.NoError(t, err)
		_, err = sub.Subscribe(ctx, busy)
		require.NoError(t, err)
		require.NoError(t, sub.Close())
	}
	said := log.find("No producer has published on this topic yet")
	require.Len(t, said, 1, "said once, for the topic without a stream: %v", log.infos)
	assert.Contains(t, said[0], lonely)
	assert.Contains(t, said[0], "--topic-prefix")
	assert.Contains(t, said[0], "consumer.WithTopicPrefix")
	assert.Empty(t, log.find(busy))
}

// PublishAsync keeps many messages in flight and confirms each only once
// JetStream stored it: every one is done without error, stored once with
// its Nats-Msg-Id, and one published again is dropped as a duplicate.
func TestNATSPublishAsyncConfirmsEachStoredMessage(t *testing.T) {
	topic := fmt.Sprintf("async_%d", time.Now().UnixNano())
	u := natsSetup(t, topic)
	b, err := Open(context.Background(), u, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	async, ok := b.Publisher().(AsyncPublisher)
	require.True(t, ok, "the NATS publisher publishes without waiting")

	const n = 500
	var wg sync.WaitGroup
	errs := make(chan error, n+1)
	ids := make([]string, n)
	for i := range n {
		ids[i] = watermill.NewUUID()
		wg.Add(1)
		async.PublishAsync(topic, message.NewMessage(ids[i], []byte(fmt.Sprintf("m%d", i))), func(err error) {
			errs <- err
			wg.Done()
		})
	}
	wg.Wait()
	again := make(chan error, 1)
	async.PublishAsync(topic, message.NewMessage(ids[0], []byte("again")), func(err error) { again <- err })
	var dup *DuplicateError
	require.ErrorAs(t, <-again, &dup, "the one sent again is dropped, and said so")
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	stream, err := natsJS(t).Stream(ctx, natsName(topic))
	require.NoError(t, err)
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(n), info.State.Msgs, "each message stored once; the one sent again dropped by its Nats-Msg-Id")
	for _, seq := range []uint64{1, n} {
		raw, err := stream.GetMsg(ctx, seq)
		require.NoError(t, err)
		assert.Equal(t, ids[seq-1], raw.Header.Get(nats.MsgIdHdr))
	}
}

// Without JetStream's ack (the server is gone) an async publish fails: it
// is never confirmed on faith. An invalid topic fails at once, permanently.
func TestNATSPublishAsyncFailsWithoutAnAck(t *testing.T) {
	topic := fmt.Sprintf("async_gone_%d", time.Now().UnixNano())
	u := natsSetup(t, topic)
	b, err := Open(context.Background(), u, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	async := b.Publisher().(AsyncPublisher)

	done := make(chan error, 1)
	async.PublishAsync("bad topic", message.NewMessage(watermill.NewUUID(), nil), func(err error) { done <- err })
	err = <-done
	var invalid *InvalidTopicError
	require.ErrorAs(t, err, &invalid)

	// The stream is deleted under the publisher: JetStream has nobody to
	// store the message and answers with no ack.
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	first := make(chan error, 1)
	async.PublishAsync(topic, message.NewMessage(watermill.NewUUID(), nil), func(err error) { first <- err })
	require.NoError(t, <-first)
	require.NoError(t, natsJS(t).DeleteStream(ctx, natsName(topic)))
	gone := make(chan error, 1)
	async.PublishAsync(topic, message.NewMessage(watermill.NewUUID(), nil), func(err error) { gone <- err })
	select {
	case err := <-gone:
		require.Error(t, err, "a message no stream stored is not confirmed")
	case <-time.After(natsAsyncTimeout + patience):
		t.Fatal("no answer for a message no stream stored")
	}
}
