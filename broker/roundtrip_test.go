package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgtest"
)

// Local services the tests use; the environment variables point them
// elsewhere.
var (
	natsURL  = envOr("NATS_URL", "nats://127.0.0.1:4222")
	amqpURL  = envOr("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
	redisURL = envOr("REDIS_URL", "redis://127.0.0.1:6379/0")
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// need skips t (fails it under CI=true) when nothing listens at the host of
// rawURL, so that a broker that is not installed is not mistaken for a bug.
func need(t testing.TB, service, rawURL string) {
	t.Helper()
	host := rawURL[strings.Index(rawURL, "://")+3:]
	if at := strings.LastIndex(host, "@"); at >= 0 {
		host = host[at+1:]
	}
	if i := strings.IndexAny(host, "/?"); i >= 0 {
		host = host[:i]
	}
	c, err := net.DialTimeout("tcp", host, 30*time.Second) // a refused dial fails at once
	if err != nil {
		pgtest.Unavailable(t, service+" at "+Redacted(rawURL), err)
	}
	_ = c.Close()
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// sentMessage is what a test published, kept apart from the
// *message.Message a publisher may hold on to.
type sentMessage struct {
	uuid     string
	payload  string
	metadata map[string]string
}

func newMessages(n int) []sentMessage {
	out := make([]sentMessage, n)
	for i := range out {
		out[i] = sentMessage{
			uuid:    watermill.NewUUID(),
			payload: fmt.Sprintf(`{"n":%d}`, i),
			metadata: map[string]string{
				events.MetaAggregateID: fmt.Sprintf("agg-%d", i%5),
				"correlation_id":       fmt.Sprintf("corr-%d", i),
				// The CloudEvents datacontenttype, which RabbitMQ
				// carries as the content-type property.
				"content-type": "application/json",
			},
		}
	}
	return out
}

// aggregateMessages is n messages over aggregates orders, round robin
// (message i is of order agg-(i mod aggregates)).
func aggregateMessages(n, aggregates int) []sentMessage {
	sent := newMessages(n)
	for i := range sent {
		sent[i].metadata[events.MetaAggregateID] = fmt.Sprintf("agg-%d", i%aggregates)
		sent[i].metadata[events.MetaAggregateType] = "order"
	}
	return sent
}

// groupPartitions subscribes a member of group "g" by partition and
// requires topic to have want partitions: the keyed ones and the rest.
func groupPartitions(ctx context.Context, t *testing.T, b Broker, topic string, want int) PartitionSubscriber {
	t.Helper()
	sub, err := b.Subscriber("g")
	require.NoError(t, err)
	ps, ok := sub.(PartitionSubscriber)
	require.True(t, ok, "a %s subscriber reads by partition", b.Scheme())
	n, err := ps.Partitions(ctx, topic)
	require.NoError(t, err)
	require.Equal(t, want, n, "%d partitions and the rest", want-1)
	return ps
}

// requirePartition subscribes to partition k of topic and requires want
// from it, in order, and nothing more for quiet.
func requirePartition(ctx context.Context, t *testing.T, ps PartitionSubscriber, topic string, k int, want []sentMessage,
	quiet time.Duration) {
	t.Helper()
	ch, err := ps.SubscribePartition(ctx, topic, k)
	require.NoError(t, err)
	assertSame(t, want, receive(ctx, t, ch, len(want)), true)
	assertNothingMore(t, ch, quiet)
}

// splitByPartition groups sent by partition out of n, each in send order.
func splitByPartition(sent []sentMessage, n int) map[int][]sentMessage {
	parts := map[int][]sentMessage{}
	for _, m := range sent {
		k := PartitionOf(m.message().Metadata, m.uuid, n)
		parts[k] = append(parts[k], m)
	}
	return parts
}

func (m sentMessage) message() *message.Message {
	msg := message.NewMessage(m.uuid, []byte(m.payload))
	for k, v := range m.metadata {
		msg.Metadata.Set(k, v)
	}
	return msg
}

func publish(t *testing.T, b Broker, topic string, msgs []sentMessage) {
	t.Helper()
	for _, m := range msgs {
		require.NoError(t, b.Publisher().Publish(topic, m.message()), "publishing %s", m.uuid)
	}
}

// receive takes n messages from ch, acking each.
func receive(ctx context.Context, t *testing.T, ch <-chan *message.Message, n int) []*message.Message {
	t.Helper()
	return collect(ctx, t, ch, n, true)
}

// collect takes n messages from ch, acking each as it comes when ack is
// set (a subscriber that holds few in flight hands out the rest only then).
func collect(ctx context.Context, t *testing.T, ch <-chan *message.Message, n int, ack bool) []*message.Message {
	t.Helper()
	var got []*message.Message
	for len(got) < n {
		select {
		case m, ok := <-ch:
			require.True(t, ok, "subscription closed after %d of %d messages", len(got), n)
			got = append(got, m)
			if ack {
				m.Ack()
			}
		case <-ctx.Done():
			t.Fatalf("received %d of %d messages: %v", len(got), n, ctx.Err())
		}
	}
	return got
}

// assertNothingMore checks no message arrives on ch for a while.
func assertNothingMore(t *testing.T, ch <-chan *message.Message, wait time.Duration) {
	t.Helper()
	select {
	case m, ok := <-ch:
		if ok {
			m.Ack()
			t.Errorf("unexpected message %s (%s)", m.UUID, m.Payload)
		}
	case <-time.After(wait):
	}
}

// assertSame checks got holds exactly the sent messages, whole, and, when
// ordered, those of each aggregate in publish order.
func assertSame(t *testing.T, sent []sentMessage, got []*message.Message, ordered bool) {
	t.Helper()
	want := make(map[string]sentMessage, len(sent))
	for _, m := range sent {
		want[m.uuid] = m
	}
	seen := map[string]bool{}
	lastOf := map[string]int{} // aggregate → index in sent of its last message received
	index := map[string]int{}
	for i, m := range sent {
		index[m.uuid] = i
	}
	for _, m := range got {
		w, ok := want[m.UUID]
		if !assert.True(t, ok, "unknown message %q", m.UUID) {
			continue
		}
		assert.False(t, seen[m.UUID], "message %s received twice", m.UUID)
		seen[m.UUID] = true
		assert.Equal(t, w.payload, string(m.Payload), "payload of %s", m.UUID)
		md := maps.Clone(m.Metadata)
		if count, ok := md[events.MetaDeliveryCount]; ok {
			// The subscriber's, on the brokers that count deliveries.
			assert.Equal(t, "1", count, "delivery count of %s", m.UUID)
			delete(md, events.MetaDeliveryCount)
		}
		assert.Equal(t, w.metadata, map[string]string(md), "metadata of %s", m.UUID)
		if ordered {
			agg := w.metadata[events.MetaAggregateID]
			if last, ok := lastOf[agg]; ok {
				assert.Greater(t, index[m.UUID], last, "%s: message %d after %d", agg, index[m.UUID], last)
			}
			lastOf[agg] = index[m.UUID]
		}
	}
	assert.Len(t, seen, len(sent))
}

// scheme sets a round trip up for one kind of broker.
type scheme struct {
	name    string
	ordered bool // one aggregate's messages arrive in publish order
	// url prepares the broker for topic (skipping when it is not available)
	// and registers its clean-up.
	url func(t *testing.T, topic string) string
	// beforePublish runs once the group has subscribed; it returns the check
	// to run after the messages were received.
	beforePublish func(ctx context.Context, t *testing.T, rawURL, topic, group string) func(sent []sentMessage)
}

func schemes() []scheme {
	return []scheme{
		{name: "nats", ordered: true, url: func(t *testing.T, topic string) string { return natsSetup(t, topic) }, beforePublish: natsChecks},
		{name: "amqp", ordered: true, url: amqpSetup, beforePublish: amqpChecks},
		{name: "redis", ordered: true, url: redisSetup},
		{name: "kafka", ordered: true, url: kafkaSetup, beforePublish: kafkaChecks},
		{name: "postgres", ordered: true, url: func(t *testing.T, _ string) string { return pgtest.New(t).URL }},
		{name: "mem", ordered: true, url: func(*testing.T, string) string { return "mem://" }},
	}
}

// TestRoundTrip publishes 50 messages through each broker to a new topic,
// receives them all in a group, then checks the group resumes after the last
// acked message when a new member replaces the old one.
func TestRoundTrip(t *testing.T) {
	for _, s := range schemes() {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			topic := "entoutbox.test." + randomSuffix()
			group := "g-" + randomSuffix()
			rawURL := s.url(t, topic)
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()

			b, err := Open(ctx, rawURL, Options{})
			require.NoError(t, err)
			defer func() { assert.NoError(t, b.Close()) }()
			assert.Equal(t, s.name, b.Scheme())

			sub, err := b.Subscriber(group)
			require.NoError(t, err)
			ch, err := sub.Subscribe(ctx, topic)
			require.NoError(t, err)
			var check func([]sentMessage)
			if s.beforePublish != nil {
				check = s.beforePublish(ctx, t, rawURL, topic, group)
			}

			sent := newMessages(50)
			publish(t, b, topic, sent)
			assertSame(t, sent, receive(ctx, t, ch, len(sent)), s.ordered)
			if check != nil {
				check(sent)
			}

			// The group keeps its position across members.
			require.NoError(t, sub.Close())
			late := newMessages(1)
			publish(t, b, topic, late)
			sub2, err := b.Subscriber(group)
			require.NoError(t, err)
			ch2, err := sub2.Subscribe(ctx, topic)
			require.NoError(t, err)
			assertSame(t, late, receive(ctx, t, ch2, 1), false)
			assertNothingMore(t, ch2, 300*time.Millisecond)
		})
	}
}

// TestNewGroupReadsHistory checks a group created after messages were
// published receives them, on every broker that keeps messages for groups
// yet unknown (RabbitMQ drops what reaches an exchange with no queue).
func TestNewGroupReadsHistory(t *testing.T) {
	for _, s := range schemes() {
		if s.name == "amqp" {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			topic := "entoutbox.history." + randomSuffix()
			rawURL := s.url(t, topic)
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			b, err := Open(ctx, rawURL, Options{})
			require.NoError(t, err)
			defer func() { assert.NoError(t, b.Close()) }()

			sent := newMessages(5)
			publish(t, b, topic, sent)
			sub, err := b.Subscriber("g-" + randomSuffix())
			require.NoError(t, err)
			ch, err := sub.Subscribe(ctx, topic)
			require.NoError(t, err)
			assertSame(t, sent, receive(ctx, t, ch, len(sent)), s.ordered)
		})
	}
}
