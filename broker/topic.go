package broker

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
)

// InvalidTopicError reports a topic that a broker cannot take as the literal
// name of one destination. It is permanent: publishing the message again
// cannot succeed, so a relay need not retry it.
type InvalidTopicError struct {
	Scheme string // canonical scheme: "nats", "amqp", "redis", "kafka", "postgres" or "mem"
	Topic  string
	Reason string
}

func (e *InvalidTopicError) Error() string {
	return fmt.Sprintf("broker: %s: invalid topic %q: %s", e.Scheme, e.Topic, e.Reason)
}

// Permanent reports true: the topic stays invalid however often it is
// retried. Callers test for it with interface{ Permanent() bool }, without
// importing this package.
func (e *InvalidTopicError) Permanent() bool { return true }

// ValidateTopic checks that topic is a literal name the broker of scheme
// (canonical or as in a URL: "postgresql", "amqps"...) can take. It returns
// nil, an *InvalidTopicError, or an error for an unknown scheme. Every
// Broker's Publish and Subscribe run the same check before they touch the
// broker.
func ValidateTopic(scheme, topic string) error {
	kind, ok := openers[strings.ToLower(scheme)]
	if !ok {
		return fmt.Errorf("broker: unknown scheme %q (want nats, amqp, redis, kafka, postgres or mem)", scheme)
	}
	if topic == "" {
		return &InvalidTopicError{Scheme: kind.scheme, Topic: topic, Reason: "it is empty"}
	}
	if reason := kind.topic(topic); reason != "" {
		return &InvalidTopicError{Scheme: kind.scheme, Topic: topic, Reason: reason}
	}
	return nil
}

// A topic check returns why a non-empty topic is not valid, or "".
type topicCheck func(topic string) string

// natsTopic: a topic is used as a JetStream subject and as the only subject
// of a stream made for it, so a wildcard or a system subject would make a
// stream that captures other traffic.
func natsTopic(t string) string {
	for _, r := range t {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Sprintf("it contains %q; a NATS subject holds no white space or control characters", r)
		}
	}
	switch {
	case strings.HasPrefix(t, "$"):
		return `subjects starting with "$" are reserved by the NATS server ($SYS, $JS, $KV, $O...)`
	case strings.HasPrefix(t, "_INBOX"):
		return `subjects starting with "_INBOX" are NATS reply subjects`
	case strings.ContainsAny(t, "*>"):
		return `"*" and ">" are NATS wildcards; a topic is one literal subject`
	}
	for _, tok := range strings.Split(t, ".") {
		if tok == "" {
			return "it has an empty token (a leading, trailing or double dot)"
		}
		if reason := partitionToken(tok); reason != "" {
			return reason
		}
	}
	return ""
}

// redisTopic: a topic is a stream key, and its partitions are the keys
// T.~0, T.~1...: no token of a topic starts with "~", so that no topic is
// another's partition.
func redisTopic(t string) string { return partitionTokens(t) }

// kafkaTopic is Kafka's own rule for topic names.
func kafkaTopic(t string) string {
	switch {
	case len(t) > 249:
		return fmt.Sprintf("it is %d characters long; Kafka allows at most 249", len(t))
	case t == "." || t == "..":
		return `"." and ".." are not allowed as Kafka topic names`
	case strings.HasPrefix(t, "__"):
		return `names starting with "__" are reserved for Kafka's internal topics`
	}
	for _, r := range t {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Sprintf("character %q is not allowed; a Kafka topic holds only letters, digits, '.', '_' and '-'", r)
		}
	}
	return ""
}

// amqpTopic: a topic is the name of a RabbitMQ exchange. Malformed UTF-8
// would make RabbitMQ close the whole connection, not only the channel.
func amqpTopic(t string) string {
	switch {
	case !utf8.ValidString(t):
		return "it is not valid UTF-8"
	case len(t) > 255:
		return fmt.Sprintf("it is %d bytes long; RabbitMQ allows at most 255", len(t))
	case strings.HasPrefix(t, "amq."):
		return `exchange names starting with "amq." are reserved by RabbitMQ`
	}
	return partitionTokens(t)
}

// postgresMaxTopic keeps watermill-sql's offsets table, "watermill_offsets_"
// + topic, within PostgreSQL's 63-byte identifiers: a longer name would be
// cut, and two topics alike in their first 45 bytes would share offsets.
const postgresMaxTopic = 63 - len("watermill_offsets_")

// postgresTopic: a topic is part of two table names; the characters are
// those watermill-sql accepts.
func postgresTopic(t string) string {
	for _, r := range t {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-$:._", r)) {
			return fmt.Sprintf("character %q is not allowed; a topic names watermill-sql tables, which take only letters, digits and - $ : . _", r)
		}
	}
	if len(t) > postgresMaxTopic {
		return fmt.Sprintf("it is %d bytes long; at most %d fit in the PostgreSQL table names made from it", len(t), postgresMaxTopic)
	}
	return ""
}

// anyTopic: a Redis stream key or an in-process topic can be any string.
func anyTopic(string) string { return "" }

// topicChecked runs the scheme's topic check before the publisher, which
// may otherwise create a stream, exchange, table or topic for it.
type topicChecked struct {
	message.Publisher
	scheme string
}

func (p topicChecked) Publish(topic string, messages ...*message.Message) error {
	if err := ValidateTopic(p.scheme, topic); err != nil {
		return err
	}
	if err := p.Publisher.Publish(topic, messages...); err != nil {
		return fmt.Errorf("broker: %s: %w", p.scheme, err)
	}
	return nil
}
