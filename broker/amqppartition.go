package broker

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill"
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitMQ partitions: the publisher sends each message to the fanout
// exchange T as before, with its partition (PartitionOf, out of
// DefaultPartitions) as routing key; a fanout exchange ignores the key, so
// every queue bound to T (a group reading the whole topic, another team's
// queue) gets every message as before. For a group that reads by
// partition, the direct exchange "T.~16partitions" is bound to T and routes
// by that key to the group's queue of partition k, "T.~k_G"; what it
// cannot route (a message of another producer, or of a publisher with
// ?partitions=0: no key, or another one) goes to its alternate exchange
// "T.~rest", a fanout bound to the group's queue "T.~16_G": partition 16,
// the last. RabbitMQ has no place to keep a partition count that every
// publisher and consumer would read, so the count is the package's, fixed
// (DefaultPartitions) and named in the exchange: a later version that
// changed it would make new exchanges, not misroute into the old ones.
//
// A queue receives only what arrives after it is declared, so a group's
// first Partitions call declares all of the group's partition queues,
// before any member reads one: no partition of the group misses a message
// for want of a queue. A group whose whole-topic queue T_G exists (it read
// the topic before, with an earlier version or Subscribe) stays whole:
// Partitions says 0, and its members share T_G as before.

// amqpSplitExchange is the direct exchange routing topic's messages by
// partition.
func amqpSplitExchange(topic string) string {
	return topic + "." + partitionMark + strconv.Itoa(DefaultPartitions) + "partitions"
}

// amqpRestExchange takes what amqpSplitExchange cannot route.
func amqpRestExchange(topic string) string { return topic + "." + partitionMark + "rest" }

// amqpPartitionsOf reads ?partitions= off an amqp:// URL: on (the default)
// or 0.
func amqpPartitionsOf(u *url.URL, raw string) (bool, string, error) {
	n, given, rest, err := partitionsParam(u, raw, DefaultPartitions)
	if given && (err != nil || n != 0 && n != DefaultPartitions) {
		return false, "", fmt.Errorf("partitions=%q: a RabbitMQ topic has %d partitions, or none with partitions=0",
			u.Query().Get("partitions"), DefaultPartitions)
	}
	return n != 0, rest, nil
}

// amqpRoutingKey is msg's partition as a routing key ("" when the
// publisher does not split).
func amqpRoutingKey(split bool, msg *message.Message) string {
	if !split {
		return ""
	}
	return strconv.Itoa(PartitionOf(msg.Metadata, msg.UUID, DefaultPartitions))
}

// amqpPartitionOf splits a partition's name (T.~k) into topic and k.
func amqpPartitionOf(name string) (string, int, error) {
	i := strings.LastIndex(name, "."+partitionMark)
	if i < 0 {
		return "", 0, fmt.Errorf("%q is not a partition's name", name)
	}
	k, err := strconv.Atoi(name[i+2:])
	if err != nil || k < 0 || k > DefaultPartitions {
		return "", 0, fmt.Errorf("%q is not a partition's name", name)
	}
	return name[:i], k, nil
}

// amqpPartitionTopology declares a partition's exchanges, queue and
// bindings for watermill-amqp's subscriber, whose topic is the partition's
// name.
type amqpPartitionTopology struct{}

func (amqpPartitionTopology) ExchangeDeclare(ch *amqp.Channel, exchange string, _ wmamqp.Config) error {
	return ch.ExchangeDeclare(exchange, "fanout", true, false, false, false, nil)
}

func (amqpPartitionTopology) BuildTopology(ch *amqp.Channel, p wmamqp.BuildTopologyParams, _ wmamqp.Config, _ watermill.LoggerAdapter) error {
	topic, k, err := amqpPartitionOf(p.Topic)
	if err != nil {
		return err
	}
	return amqpDeclarePartition(ch, topic, k, p.QueueName)
}

// amqpDeclareSplit declares topic's exchanges: T, the split one bound to
// it, and the rest.
func amqpDeclareSplit(ch *amqp.Channel, topic string) error {
	split, rest := amqpSplitExchange(topic), amqpRestExchange(topic)
	if err := ch.ExchangeDeclare(topic, "fanout", true, false, false, false, nil); err != nil {
		return fmt.Errorf("declaring exchange %q: %w", topic, err)
	}
	if err := ch.ExchangeDeclare(rest, "fanout", true, false, false, false, nil); err != nil {
		return fmt.Errorf("declaring exchange %q: %w", rest, err)
	}
	if err := ch.ExchangeDeclare(split, "direct", true, false, false, false, amqp.Table{"alternate-exchange": rest}); err != nil {
		return fmt.Errorf("declaring exchange %q: %w", split, err)
	}
	if err := ch.ExchangeBind(split, "", topic, false, nil); err != nil {
		return fmt.Errorf("binding exchange %q to %q: %w", split, topic, err)
	}
	return nil
}

// amqpDeclarePartition declares queue, partition k of topic for its group,
// and binds it.
func amqpDeclarePartition(ch *amqp.Channel, topic string, k int, queue string) error {
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declaring queue %q: %w", queue, err)
	}
	exchange, key := amqpSplitExchange(topic), strconv.Itoa(k)
	if k == DefaultPartitions {
		exchange, key = amqpRestExchange(topic), ""
	}
	if err := ch.QueueBind(queue, key, exchange, false, nil); err != nil {
		return fmt.Errorf("binding queue %q to exchange %q: %w", queue, exchange, err)
	}
	return nil
}

// amqpPartitionQueue is group's queue of partition k of topic.
func amqpPartitionQueue(topic, group string, k int) string {
	return partitionName(topic, k) + "_" + group
}

// Partitions implements PartitionSubscriber: DefaultPartitions and the
// rest, once every queue of the group is declared; 0 for a group that
// reads the topic whole.
func (s *amqpSubscriber) Partitions(ctx context.Context, topic string) (int, error) {
	if s.parts == nil {
		return 0, nil
	}
	return bounded(ctx, func() (int, error) {
		conn, err := s.pub.connect()
		if err != nil {
			return 0, err
		}
		whole, err := amqpQueueExists(conn, topic+"_"+s.group)
		if err != nil || whole {
			return 0, err
		}
		ch, err := conn.Channel()
		if err != nil {
			return 0, fmt.Errorf("opening a channel: %w", err)
		}
		defer ch.Close()
		if err := amqpDeclareSplit(ch, topic); err != nil {
			return 0, err
		}
		for k := range DefaultPartitions + 1 {
			if err := amqpDeclarePartition(ch, topic, k, amqpPartitionQueue(topic, s.group, k)); err != nil {
				return 0, err
			}
		}
		return DefaultPartitions + 1, nil
	}, func(int) {})
}

// SubscribePartition implements PartitionSubscriber.
func (s *amqpSubscriber) SubscribePartition(ctx context.Context, topic string, k int) (<-chan *message.Message, error) {
	if s.parts == nil || k < 0 || k > DefaultPartitions {
		return nil, fmt.Errorf("no partition %d of topic %q for group %q", k, topic, s.group)
	}
	return s.parts.Subscribe(ctx, partitionName(topic, k))
}

// amqpQueueExists asks RabbitMQ with a passive declare, on a channel of
// its own: a missing queue closes the channel it was asked on.
func amqpQueueExists(conn *amqp.Connection, name string) (bool, error) {
	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("opening a channel: %w", err)
	}
	_, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
	var aerr *amqp.Error
	if errors.As(err, &aerr) && aerr.Code == amqp.NotFound {
		return false, nil
	}
	_ = ch.Close()
	return err == nil, err
}

// Close closes both of the module's subscribers.
func (s *amqpSubscriber) Close() error {
	err := s.Subscriber.Close()
	if s.parts != nil {
		err = errors.Join(err, s.parts.Close())
	}
	return err
}

var _ PartitionSubscriber = (*amqpSubscriber)(nil)
