package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
)

// A topic's stream is split into partitions by aggregate: each partition's
// subscription gets exactly the messages of the aggregates hashed to it,
// in publish order, and nothing of the others; a group reading the whole
// topic still gets every message.
func TestNATSPartitionsRouteByAggregate(t *testing.T) {
	t.Parallel()
	ctx, b, topic := natsStart(t, "parts", "?partitions=4")
	sent := aggregateMessages(40, 10)
	publish(t, b, topic, sent)

	stream, err := natsJS(t).Stream(ctx, natsName(topic))
	require.NoError(t, err)
	assert.Equal(t, natsSubjects(topic, 4), stream.CachedInfo().Config.Subjects)

	ps := groupPartitions(ctx, t, b, topic, 5) // 4 and the topic's own subject
	byPartition := splitByPartition(sent, 4)
	require.Greater(t, len(byPartition), 1, "10 aggregates land in more than one of 4 partitions")
	for k := range 4 { // the keyed ones; the last is read below
		requirePartition(ctx, t, ps, topic, k, byPartition[k], 300*time.Millisecond)
	}
	_, err = ps.SubscribePartition(ctx, topic, 5)
	require.ErrorContains(t, err, "no partition 5")

	// What another publisher sends to the topic's own subject is the last
	// partition's.
	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	defer nc.Close()
	foreign := nats.NewMsg(topic)
	foreign.Data = []byte("from elsewhere")
	foreign.Header.Set("_watermill_message_uuid", "foreign-1")
	_, err = natsJS(t).PublishMsg(ctx, foreign)
	require.NoError(t, err)
	last, err := ps.SubscribePartition(ctx, topic, 4)
	require.NoError(t, err)
	got := receive(ctx, t, last, 1)
	require.Equal(t, "foreign-1", got[0].UUID)

	_, whole := natsMember(ctx, t, b, "whole", topic)
	assertSame(t, sent, receive(ctx, t, whole, len(sent)), true)
	require.Equal(t, "foreign-1", receive(ctx, t, whole, 1)[0].UUID, "the whole topic's reader gets the foreign one too")
}

// The stream, not the URL, says how a topic is split: a stream made whole
// (an earlier version, ?partitions=0) stays whole for a publisher and a
// subscriber asking for partitions, and its group reads it whole.
func TestNATSWholeStreamStaysWhole(t *testing.T) {
	t.Parallel()
	topic := "entoutbox.whole." + randomSuffix()
	base := natsSetup(t, topic)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	whole := natsOpen(ctx, t, base+"?partitions=0")
	sent := newMessages(6)
	publish(t, whole, topic, sent[:3])
	split := natsOpen(ctx, t, base+"?partitions=8")
	publish(t, split, topic, sent[3:])

	stream, err := natsJS(t).Stream(ctx, natsName(topic))
	require.NoError(t, err)
	assert.Equal(t, []string{topic}, stream.CachedInfo().Config.Subjects)
	sub, err := split.Subscriber("g")
	require.NoError(t, err)
	n, err := sub.(PartitionSubscriber).Partitions(ctx, topic)
	require.NoError(t, err)
	assert.Zero(t, n)
	ch, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	assertSame(t, sent, receive(ctx, t, ch, len(sent)), true)
}

// A group that read the whole topic and then reads by partition starts
// each partition after what it acked: nothing acked comes again.
func TestNATSPartitionConsumersStartAfterTheWholeOne(t *testing.T) {
	t.Parallel()
	ctx, b, topic := natsStart(t, "switch", "?partitions=2")
	sent := newMessages(10)
	publish(t, b, topic, sent[:4])
	first, ch := natsMember(ctx, t, b, "g", topic)
	receive(ctx, t, ch, 4)
	require.NoError(t, first.Close())
	require.Eventually(t, func() bool {
		c, err := natsJS(t).Consumer(ctx, natsName(topic), natsConsumerName("g", topic))
		return err == nil && c.CachedInfo().AckFloor.Stream == 4
	}, patience, 50*time.Millisecond, "the whole consumer's acks are recorded")
	publish(t, b, topic, sent[4:])

	sub, err := b.Subscriber("g")
	require.NoError(t, err)
	ps := sub.(PartitionSubscriber)
	var got []sentMessage
	for k := range 2 { // (partition 2, the topic's own subject, holds nothing)
		var want []sentMessage
		for _, m := range sent[4:] {
			if PartitionOf(m.message().Metadata, m.uuid, 2) == k {
				want = append(want, m)
			}
		}
		pch, err := ps.SubscribePartition(ctx, topic, k)
		require.NoError(t, err)
		assertSame(t, want, receive(ctx, t, pch, len(want)), true)
		assertNothingMore(t, pch, 300*time.Millisecond)
		got = append(got, want...)
	}
	require.Len(t, got, 6)
	_, err = natsJS(t).Consumer(ctx, natsName(topic), natsPartitionConsumerName("g", topic, 0))
	require.NotErrorIs(t, err, jetstream.ErrConsumerNotFound)
}

func TestPartitionOfKeepsAnAggregateTogether(t *testing.T) {
	md := func(typ, id string) map[string]string {
		return map[string]string{events.MetaAggregateType: typ, events.MetaAggregateID: id}
	}
	seen := map[int]bool{}
	for i := range 100 {
		m := sentMessage{uuid: fmt.Sprint(i), metadata: md("order", "a")}.message()
		seen[PartitionOf(m.Metadata, m.UUID, 16)] = true
	}
	assert.Len(t, seen, 1, "one aggregate, one partition, whatever the message")
	spread := map[int]bool{}
	for i := range 200 {
		m := sentMessage{uuid: "x", metadata: md("order", fmt.Sprint(i))}.message()
		spread[PartitionOf(m.Metadata, m.UUID, 16)] = true
	}
	assert.Len(t, spread, 16, "200 aggregates cover 16 partitions")
	assert.Zero(t, PartitionOf(nil, "u", 0))
	assert.Zero(t, PartitionOf(nil, "u", 1))
}

// A tenant's aggregate is one: its events share a partition. Tenants'
// aggregates of the same id are many, spread as distinct ids are.
func TestPartitionOfSpreadsTenantsOfOneAggregateID(t *testing.T) {
	of := func(tenant, uuid string) int {
		m := sentMessage{uuid: uuid, metadata: map[string]string{
			events.MetaAggregateType: "order", events.MetaAggregateID: "1", events.MetaTenant: tenant}}.message()
		return PartitionOf(m.Metadata, m.UUID, 16)
	}
	for i := range 50 {
		assert.Equal(t, of("acme", "a"), of("acme", fmt.Sprint(i)), "one tenant's aggregate, one partition")
	}
	spread := map[int]bool{}
	for i := range 200 {
		spread[of(fmt.Sprint("tenant-", i), "x")] = true
	}
	assert.Len(t, spread, 16, "order 1 of 200 tenants covers 16 partitions")
}
