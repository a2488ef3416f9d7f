package broker

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/url"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/entoutbox/entoutbox/events"
)

// Partitions: where the broker can route by key, a topic is split into a
// fixed number of partitions by a hash of each message's aggregate, and a
// group's members each read their share of them (PartitionSubscriber), so
// that while the members stay the same one aggregate's events reach one
// member. Which member reads which partition is the caller's to decide
// (the consumer package keeps a member list in the database); the broker
// only carries the messages. Nothing depends on it for correctness: the
// consumers' number check keeps each aggregate in order wherever its
// events go; it spares the members waiting on each other.

// DefaultPartitions is how many partitions a topic the broker makes is
// split into, unless the URL sets ?partitions= (0 keeps it whole): a
// fair share for up to 16 members of a group.
const DefaultPartitions = 16

// PartitionOf returns the partition, out of n, of a message with this
// metadata: a hash of its aggregate (type and id, and its tenant when it
// has one), so that every message of an aggregate has the same one, on
// every publisher; a message without an aggregate goes by its UUID.
// Tenants share aggregate ids, not aggregates: with the tenant in the hash
// their events are spread over the partitions as distinct aggregates'
// are, and one partition's window is not filled with many tenants'
// events of one id that all wait for their predecessors.
func PartitionOf(md message.Metadata, uuid string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	if id := md.Get(events.MetaAggregateID); id != "" {
		if tenant := md.Get(events.MetaTenant); tenant != "" {
			_, _ = h.Write([]byte(tenant))
			_, _ = h.Write([]byte{'/'})
		}
		_, _ = h.Write([]byte(md.Get(events.MetaAggregateType)))
		_, _ = h.Write([]byte{':'})
		_, _ = h.Write([]byte(id))
	} else {
		_, _ = h.Write([]byte(uuid))
	}
	return int(h.Sum32() % uint32(n))
}

// PartitionSubscriber is what a Broker's Subscriber also is when its
// broker routes a topic's messages by partition (NATS, Redis, RabbitMQ).
type PartitionSubscriber interface {
	message.Subscriber
	// Partitions returns how many partitions topic is split into; 0 when
	// it is not (a topic made before partitions, or by ?partitions=0):
	// then only Subscribe reads it.
	Partitions(ctx context.Context, topic string) (int, error)
	// SubscribePartition reads the group's messages of one partition of
	// topic until ctx ends, as Subscribe does the whole topic. A message
	// comes from one partition only, so members reading disjoint
	// partitions never receive the same delivery.
	SubscribePartition(ctx context.Context, topic string, partition int) (<-chan *message.Message, error)
}

// partitionSubscriber is an owned subscriber whose broker routes by
// partition.
type partitionSubscriber struct {
	*ownedSubscriber
	p PartitionSubscriber
}

func (s partitionSubscriber) Partitions(ctx context.Context, topic string) (int, error) {
	if err := ValidateTopic(s.parent.scheme, topic); err != nil {
		return 0, err
	}
	n, err := s.p.Partitions(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("broker: %s: partitions of %q: %w", s.parent.scheme, topic, err)
	}
	return n, nil
}

func (s partitionSubscriber) SubscribePartition(ctx context.Context, topic string, partition int) (<-chan *message.Message, error) {
	if err := ValidateTopic(s.parent.scheme, topic); err != nil {
		return nil, err
	}
	ch, err := s.p.SubscribePartition(ctx, topic, partition)
	if err != nil {
		return nil, fmt.Errorf("broker: %s: subscribing to partition %d of %q: %w", s.parent.scheme, partition, topic, err)
	}
	return ch, nil
}

// concurrentPartitionSubscriber is both.
type concurrentPartitionSubscriber struct {
	partitionSubscriber
	c ConcurrentSubscriber
}

func (s concurrentPartitionSubscriber) MaxInFlight() int    { return s.c.MaxInFlight() }
func (s concurrentPartitionSubscriber) LimitInFlight(n int) { s.c.LimitInFlight(n) }

// wrapSubscriber gives owned the optional interfaces sub has.
func wrapSubscriber(owned *ownedSubscriber, sub message.Subscriber) message.Subscriber {
	c, concurrent := sub.(ConcurrentSubscriber)
	p, partitioned := sub.(PartitionSubscriber)
	switch {
	case concurrent && partitioned:
		return concurrentPartitionSubscriber{partitionSubscriber{owned, p}, c}
	case partitioned:
		return partitionSubscriber{owned, p}
	case concurrent:
		return concurrentSubscriber{owned, c}
	}
	return owned
}

// partitionMark starts the last token of a partition's name (a NATS
// subject, a Redis stream key): topic.~k. A topic cannot have a token
// starting with it (partitionToken), so no topic is another's partition.
const partitionMark = "~"

// partitionName is the name of partition k of topic on the broker.
func partitionName(topic string, k int) string {
	return topic + "." + partitionMark + strconv.Itoa(k)
}

// partitionToken says why a topic's dot-separated token cannot be one, or "".
func partitionToken(tok string) string {
	if strings.HasPrefix(tok, partitionMark) {
		return fmt.Sprintf("token %q starts with %q, which marks the partitions of a topic", tok, partitionMark)
	}
	return ""
}

// partitionTokens is partitionToken for each token of topic.
func partitionTokens(topic string) string {
	for _, tok := range strings.Split(topic, ".") {
		if reason := partitionToken(tok); reason != "" {
			return reason
		}
	}
	return ""
}

// partitionsParam reads ?partitions= off a broker URL: the number (from 0
// to most), whether the URL gives it, and the URL without it, for client
// libraries that refuse options they do not know.
func partitionsParam(u *url.URL, raw string, most int) (n int, given bool, rest string, err error) {
	q := u.Query()
	if !q.Has("partitions") {
		return DefaultPartitions, false, raw, nil
	}
	v := q.Get("partitions")
	n, err = strconv.Atoi(v)
	if err != nil || n < 0 || n > most {
		return 0, true, "", fmt.Errorf("partitions=%q is not a number from 0 to %d", v, most)
	}
	q.Del("partitions")
	stripped := *u
	stripped.RawQuery = q.Encode()
	return n, true, stripped.String(), nil
}
