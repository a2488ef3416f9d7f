package broker

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestValidateTopic checks each broker's rule, topic by topic, with the
// exact error.
func TestValidateTopic(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	valid := map[string][]string{
		"nats":     {"orders", "orders.created", "a-b_c.D9", "orders:eu", "_inbox", "a$b"},
		"kafka":    {"orders", "orders.created", "a-b_c.D9", "_x", long(249), "..a"},
		"amqp":     {"orders", "orders.created", "a b/c*#", "ordér", long(255), "amq"},
		"postgres": {"orders", "orders.created", "a-b_c.D9", "$x:y", long(45)},
		"redis":    {"orders", "a b/c*>", "$SYS"},
		"mem":      {"orders", "a b/c*>"},
	}
	for scheme, topics := range valid {
		for _, topic := range topics {
			assert.NoError(t, ValidateTopic(scheme, topic), "%s %q", scheme, topic)
		}
	}

	for _, tc := range []struct{ scheme, topic, want string }{
		{"nats", "", `broker: nats: invalid topic "": it is empty`},
		{"nats", ">", `broker: nats: invalid topic ">": "*" and ">" are NATS wildcards; a topic is one literal subject`},
		{"nats", "orders.>", `broker: nats: invalid topic "orders.>": "*" and ">" are NATS wildcards; a topic is one literal subject`},
		{"nats", "*", `broker: nats: invalid topic "*": "*" and ">" are NATS wildcards; a topic is one literal subject`},
		{"nats", "orders.*.eu", `broker: nats: invalid topic "orders.*.eu": "*" and ">" are NATS wildcards; a topic is one literal subject`},
		{"nats", "a..b", `broker: nats: invalid topic "a..b": it has an empty token (a leading, trailing or double dot)`},
		{"nats", ".orders", `broker: nats: invalid topic ".orders": it has an empty token (a leading, trailing or double dot)`},
		{"nats", "orders.", `broker: nats: invalid topic "orders.": it has an empty token (a leading, trailing or double dot)`},
		{"nats", "my orders", `broker: nats: invalid topic "my orders": it contains ' '; a NATS subject holds no white space or control characters`},
		{"nats", "orders\t", `broker: nats: invalid topic "orders\t": it contains '\t'; a NATS subject holds no white space or control characters`},
		{"nats", "orders\x00", `broker: nats: invalid topic "orders\x00": it contains '\x00'; a NATS subject holds no white space or control characters`},
		{"nats", "$SYS.ACCOUNT", `broker: nats: invalid topic "$SYS.ACCOUNT": subjects starting with "$" are reserved by the NATS server ($SYS, $JS, $KV, $O...)`},
		{"nats", "$JS.API.INFO", `broker: nats: invalid topic "$JS.API.INFO": subjects starting with "$" are reserved by the NATS server ($SYS, $JS, $KV, $O...)`},
		{"nats", "$KV.b.k", `broker: nats: invalid topic "$KV.b.k": subjects starting with "$" are reserved by the NATS server ($SYS, $JS, $KV, $O...)`},
		{"nats", "$O.b", `broker: nats: invalid topic "$O.b": subjects starting with "$" are reserved by the NATS server ($SYS, $JS, $KV, $O...)`},
		{"nats", "$orders", `broker: nats: invalid topic "$orders": subjects starting with "$" are reserved by the NATS server ($SYS, $JS, $KV, $O...)`},
		{"nats", "_INBOX.abc", `broker: nats: invalid topic "_INBOX.abc": subjects starting with "_INBOX" are NATS reply subjects`},
		{"nats", "_INBOX", `broker: nats: invalid topic "_INBOX": subjects starting with "_INBOX" are NATS reply subjects`},

		{"kafka", "", `broker: kafka: invalid topic "": it is empty`},
		{"kafka", ".", `broker: kafka: invalid topic ".": "." and ".." are not allowed as Kafka topic names`},
		{"kafka", "..", `broker: kafka: invalid topic "..": "." and ".." are not allowed as Kafka topic names`},
		{"kafka", long(250), `broker: kafka: invalid topic "` + long(250) + `": it is 250 characters long; Kafka allows at most 249`},
		{"kafka", "orders/eu", `broker: kafka: invalid topic "orders/eu": character '/' is not allowed; a Kafka topic holds only letters, digits, '.', '_' and '-'`},
		{"kafka", "orders eu", `broker: kafka: invalid topic "orders eu": character ' ' is not allowed; a Kafka topic holds only letters, digits, '.', '_' and '-'`},
		{"kafka", "ordér", `broker: kafka: invalid topic "ordér": character 'é' is not allowed; a Kafka topic holds only letters, digits, '.', '_' and '-'`},
		{"kafka", "__consumer_offsets", `broker: kafka: invalid topic "__consumer_offsets": names starting with "__" are reserved for Kafka's internal topics`},

		{"amqp", "", `broker: amqp: invalid topic "": it is empty`},
		{"amqps", "amq.fanout", `broker: amqp: invalid topic "amq.fanout": exchange names starting with "amq." are reserved by RabbitMQ`},
		{"amqp", long(256), `broker: amqp: invalid topic "` + long(256) + `": it is 256 bytes long; RabbitMQ allows at most 255`},
		{"amqp", "ord\xffers", `broker: amqp: invalid topic "ord\xffers": it is not valid UTF-8`},

		{"postgres", "", `broker: postgres: invalid topic "": it is empty`},
		{"postgresql", "orders/eu", `broker: postgres: invalid topic "orders/eu": character '/' is not allowed; a topic names watermill-sql tables, which take only letters, digits and - $ : . _`},
		{"postgres", `a"b`, `broker: postgres: invalid topic "a\"b": character '"' is not allowed; a topic names watermill-sql tables, which take only letters, digits and - $ : . _`},
		{"postgres", long(46), `broker: postgres: invalid topic "` + long(46) + `": it is 46 bytes long; at most 45 fit in the PostgreSQL table names made from it`},

		{"redis", "", `broker: redis: invalid topic "": it is empty`},
		{"mem", "", `broker: mem: invalid topic "": it is empty`},
		{"inprocess", "", `broker: mem: invalid topic "": it is empty`},
	} {
		err := ValidateTopic(tc.scheme, tc.topic)
		if !assert.Error(t, err, "%s %q", tc.scheme, tc.topic) {
			continue
		}
		assert.Equal(t, tc.want, err.Error())
		var invalid *InvalidTopicError
		if assert.ErrorAs(t, err, &invalid) {
			assert.Equal(t, tc.topic, invalid.Topic)
		}
		assertPermanent(t, err)
	}

	err := ValidateTopic("foo", "orders")
	require.Error(t, err)
	assert.Equal(t, `broker: unknown scheme "foo" (want nats, amqp, redis, kafka, postgres or mem)`, err.Error())
	assert.False(t, errors.As(err, new(interface{ Permanent() bool })))
}

// assertPermanent checks err is marked permanent the way a caller that does
// not import this package tests it.
func assertPermanent(t *testing.T, err error) {
	t.Helper()
	var p interface{ Permanent() bool }
	if assert.ErrorAs(t, err, &p, "%v", err) {
		assert.True(t, p.Permanent())
	}
}

// TestBrokerChecksTopics checks Publish and Subscribe of a Broker refuse an
// invalid topic with the permanent error, here on mem://, which takes any
// non-empty topic.
func TestBrokerChecksTopics(t *testing.T) {
	b, err := Open(context.Background(), "mem://", Options{})
	require.NoError(t, err)
	defer b.Close()
	err = b.Publisher().Publish("", newMessages(1)[0].message())
	assert.EqualError(t, err, `broker: mem: invalid topic "": it is empty`)
	assertPermanent(t, err)
	sub, err := b.Subscriber("g")
	require.NoError(t, err)
	_, err = sub.Subscribe(context.Background(), "")
	assert.EqualError(t, err, `broker: mem: invalid topic "": it is empty`)
}

// TestNATSRefusesWildcardTopics publishes and subscribes through the real
// server to wildcard and system subjects: each is refused with the
// permanent error and no stream is made that captures the subject.
func TestNATSRefusesWildcardTopics(t *testing.T) {
	need(t, "NATS", natsURL)
	js := natsJS(t)
	unique := "entoutbox.wild." + randomSuffix()
	topics := []string{unique + ".>", unique + ".*", unique + ".*.x", ">", "orders.>", "*", "$SYS.x", "_INBOX.x"}
	t.Cleanup(func() {
		// Should the check ever let one through, leave no stream behind.
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		for _, topic := range topics {
			if err := js.DeleteStream(ctx, natsName(topic)); err == nil {
				t.Errorf("a stream %s had been made for %q", natsName(topic), topic)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	b, err := Open(ctx, natsURL, Options{})
	require.NoError(t, err)
	defer b.Close()
	sub, err := b.Subscriber("g-" + randomSuffix())
	require.NoError(t, err)

	for _, topic := range topics {
		err := b.Publisher().Publish(topic, newMessages(1)[0].message())
		require.Error(t, err, topic)
		assert.True(t, strings.HasPrefix(err.Error(), "broker: nats: invalid topic "+`"`+topic+`": `), "%v", err)
		assertPermanent(t, err)
		_, err = sub.Subscribe(ctx, topic)
		require.Error(t, err, topic)
		assertPermanent(t, err)

		_, err = js.Stream(ctx, natsName(topic))
		assert.ErrorIs(t, err, jetstream.ErrStreamNotFound, "stream for %q", topic)
	}
	// No stream captures the test's own wildcard subjects. (">" and
	// "orders.>" overlap the streams of other tests on the shared server,
	// so for them only the stream named after the topic is checked above.)
	for _, subject := range topics[:3] {
		_, err := js.StreamNameBySubject(ctx, subject)
		assert.ErrorIs(t, err, jetstream.ErrStreamNotFound, "a stream captures %q", subject)
	}
	lister := js.ListStreams(ctx)
	for info := range lister.Info() {
		for _, s := range info.Config.Subjects {
			for _, topic := range topics {
				assert.NotEqual(t, topic, s, "stream %s captures %q", info.Config.Name, s)
			}
		}
	}
	require.NoError(t, lister.Err())
}

func TestMessagingSystemNamesOpenTelemetryUses(t *testing.T) {
	for scheme, want := range map[string]string{"amqp": "rabbitmq", "nats": "nats", "kafka": "kafka", "redis": "redis",
		"postgres": "postgresql", "mem": "watermill"} {
		if got := MessagingSystem(scheme); got != want {
			t.Errorf("MessagingSystem(%q) = %q, want %q", scheme, got, want)
		}
	}
}
