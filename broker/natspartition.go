package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"
)

// Partitions on NATS (see partition.go). The stream made for topic T has
// the subjects T and T.~0 ... T.~(n-1) (n from ?partitions=, default
// DefaultPartitions); a publisher sends each message to its partition's
// subject. Group G reads partition k through its own durable pull
// consumer natsName(G+"-"+T)+"_p<k>_pull", filtered on T.~k, so members
// pull only their partitions; Subscribe's consumer reads the whole stream
// as before. A stream made without partition subjects (by an earlier
// version, by hand, or with ?partitions=0) is read and written whole: the
// stream, not the URL, says how a topic is split, so every publisher and
// member agrees.
//
// The topic's own subject T stays in the stream, for publishers other than
// this package's (a core NATS client, another service): what they send
// there is one more partition, numbered n, so that members reading by
// partition read it too (Partitions says n+1).

// natsMaxPartitions bounds ?partitions=: each is a durable consumer per group.
const natsMaxPartitions = 256

// natsPartitionSubject is the subject of partition k of topic.
func natsPartitionSubject(topic string, k int) string { return partitionName(topic, k) }

// natsSubjects are the subjects of a stream made for topic split into n
// partitions.
func natsSubjects(topic string, n int) []string {
	subjects := []string{topic}
	for k := range n {
		subjects = append(subjects, natsPartitionSubject(topic, k))
	}
	return subjects
}

// natsPartitionsOf returns how many partitions of topic a stream with
// these subjects carries: those numbered from 0 without a hole.
func natsPartitionsOf(topic string, subjects []string) int {
	n := 0
	for slices.Contains(subjects, natsPartitionSubject(topic, n)) {
		n++
	}
	return n
}

// natsWholeFilter is the subject filter of a consumer of the whole topic:
// the topic alone on a stream without partitions; none on a stream made
// for the topic with partitions (it carries nothing else); the partitions
// on a stream that carries more: T.* (a NATS wildcard is a whole token, so
// this also takes any other T.x subject of that stream, and NATS 2.9 has
// one filter per consumer, so it leaves out T itself).
func natsWholeFilter(topic string, st natsStream) string {
	switch {
	case st.partitions == 0:
		return topic
	case slices.Equal(st.subjects, natsSubjects(topic, st.partitions)):
		return ""
	}
	return topic + ".*"
}

// natsPublishSubject is where msg of topic goes on st.
func natsPublishSubject(topic string, st natsStream, msg *message.Message) string {
	if st.partitions == 0 {
		return topic
	}
	return natsPartitionSubject(topic, PartitionOf(msg.Metadata, msg.UUID, st.partitions))
}

// natsPartitionFilter is the subject partition k of topic is read from on
// st: the topic's own one after the keyed ones.
func natsPartitionFilter(topic string, st natsStream, k int) string {
	if k == st.partitions {
		return topic
	}
	return natsPartitionSubject(topic, k)
}

// natsPartitionConsumerName names group's durable consumer of partition k of topic.
func natsPartitionConsumerName(group, topic string, k int) string {
	return natsName(group+"-"+topic) + "_p" + strconv.Itoa(k) + "_pull"
}

// Partitions implements PartitionSubscriber.
func (s *natsSubscriber) Partitions(ctx context.Context, topic string) (int, error) {
	pctx, cancel := context.WithTimeout(ctx, natsProvisionTimeout)
	defer cancel()
	st, _, err := s.topo.ensureStream(pctx, s.js, topic)
	if err != nil {
		return 0, err
	}
	if st.partitions == 0 {
		return 0, nil
	}
	return st.partitions + 1, nil // and the topic's own subject
}

// SubscribePartition implements PartitionSubscriber.
func (s *natsSubscriber) SubscribePartition(ctx context.Context, topic string, k int) (<-chan *message.Message, error) {
	pctx, cancel := context.WithTimeout(ctx, natsProvisionTimeout)
	defer cancel()
	st, _, err := s.topo.ensureStream(pctx, s.js, topic)
	if err != nil {
		return nil, err
	}
	if st.partitions == 0 || k < 0 || k > st.partitions {
		return nil, fmt.Errorf("no partition %d of topic %q on stream %q: it has %d and its own subject (%d)",
			k, topic, st.name, st.partitions, st.partitions)
	}
	durable, err := s.topo.ensurePartitionConsumer(pctx, s.js, st, topic, s.group, k)
	if err != nil {
		return nil, err
	}
	return s.pull(ctx, topic, st.name, durable)
}

// ensurePartitionConsumer provisions group's durable pull consumer of
// partition k of topic and returns its name. A new one starts where the
// group's consumer of the whole topic is, if it has one (its members
// were of an earlier version, or did not read by partition): what it
// acked is not delivered again.
func (t *natsTopology) ensurePartitionConsumer(ctx context.Context, js jetstream.JetStream, st natsStream, topic, group string, k int) (string, error) {
	name := natsPartitionConsumerName(group, topic, k)
	cons, err := js.Consumer(ctx, st.name, name)
	if err == nil {
		cfg := cons.CachedInfo().Config
		if cfg.AckWait != t.ackWait || cfg.MaxAckPending != t.maxAckPending {
			cfg.AckWait, cfg.MaxAckPending = t.ackWait, t.maxAckPending
			if _, err := js.UpdateConsumer(ctx, st.name, cfg); err != nil {
				return name, t.consumerFailed(topic, st, name, err)
			}
		}
		return name, nil
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return name, t.consumerFailed(topic, st, name, err)
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       name,
		Description:   fmt.Sprintf("entoutbox group %q on partition %d of topic %q", group, k, topic),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		FilterSubject: natsPartitionFilter(topic, st, k),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       t.ackWait,
		MaxAckPending: t.maxAckPending,
	}
	whole, err := js.Consumer(ctx, st.name, natsConsumerName(group, topic))
	switch {
	case err == nil:
		if floor := whole.CachedInfo().AckFloor.Stream; floor > 0 {
			cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
			cfg.OptStartSeq = floor + 1
		}
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return name, t.consumerFailed(topic, st, name, err)
	}
	if _, err := js.CreateConsumer(ctx, st.name, cfg); err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
		// Made meanwhile by another member: the same config, join it.
		if _, err2 := js.Consumer(ctx, st.name, name); err2 != nil {
			return name, t.consumerFailed(topic, st, name, err)
		}
	}
	return name, nil
}

func (t *natsTopology) consumerFailed(topic string, st natsStream, name string, err error) error {
	t.forget(topic)
	return fmt.Errorf("provisioning JetStream consumer %q on stream %q: %w", name, st.name, err)
}
