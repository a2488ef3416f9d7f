package broker

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func redisClient(t *testing.T) *redis.Client {
	opts, err := redis.ParseURL(redisURL)
	require.NoError(t, err)
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A split topic's messages go to the stream of their aggregate's
// partition, a member reading a partition gets exactly those, in publish
// order; what another producer adds to the topic's own stream is the last
// partition's; a reader of the whole topic gets everything.
func TestRedisPartitionsRouteByAggregate(t *testing.T) {
	t.Parallel()
	topic := "entoutbox.parts." + randomSuffix()
	base := redisSetup(t, topic)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	b, err := Open(ctx, base+"?partitions=4", Options{})
	require.NoError(t, err)
	defer b.Close()
	sent := aggregateMessages(40, 10)
	// One Publish, as the relay sends a batch: split into runs by partition.
	batch := make([]*message.Message, len(sent))
	for i, m := range sent {
		batch[i] = m.message()
	}
	require.NoError(t, b.Publisher().Publish(topic, batch...))

	rc := redisClient(t)
	assert.Equal(t, "4", rc.Get(ctx, redisPartitionsKey(topic)).Val())
	byPartition := splitByPartition(sent, 4)
	require.Greater(t, len(byPartition), 1, "10 aggregates land in more than one of 4 partitions")
	for k := range 4 {
		assert.EqualValues(t, len(byPartition[k]), rc.XLen(ctx, partitionName(topic, k)).Val(), "stream of partition %d", k)
	}

	ps := groupPartitions(ctx, t, b, topic, 5) // 4 and the topic's own stream
	for k := range 4 {
		requirePartition(ctx, t, ps, topic, k, byPartition[k], 300*time.Millisecond)
	}
	_, err = ps.SubscribePartition(ctx, topic, 5)
	require.ErrorContains(t, err, "no partition 5")

	require.NoError(t, rc.XAdd(ctx, &redis.XAddArgs{Stream: topic, Values: map[string]any{
		"_watermill_message_uuid": "foreign-1", "payload": "from elsewhere"}}).Err())
	last, err := ps.SubscribePartition(ctx, topic, 4)
	require.NoError(t, err)
	require.Equal(t, "foreign-1", receive(ctx, t, last, 1)[0].UUID)

	wsub, err := b.Subscriber("whole")
	require.NoError(t, err)
	whole, err := wsub.Subscribe(ctx, topic)
	require.NoError(t, err)
	got := receive(ctx, t, whole, len(sent)+1)
	uuids := map[string]bool{}
	for _, m := range got {
		uuids[m.UUID] = true
	}
	assert.True(t, uuids["foreign-1"], "the whole topic's reader gets the foreign one too")
	assertSame(t, byPartition[0], inOrderOf(got, byPartition[0]), true)
}

// inOrderOf keeps the messages of got that are in want, in got's order.
func inOrderOf(got []*message.Message, want []sentMessage) []*message.Message {
	in := map[string]bool{}
	for _, m := range want {
		in[m.uuid] = true
	}
	var kept []*message.Message
	for _, m := range got {
		if in[m.UUID] {
			kept = append(kept, m)
		}
	}
	return kept
}

// A topic whose stream existed before partitions stays whole, whatever a
// later URL asks for, and its group reads it whole.
func TestRedisWholeStreamStaysWhole(t *testing.T) {
	t.Parallel()
	topic := "entoutbox.whole." + randomSuffix()
	base := redisSetup(t, topic)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	rc := redisClient(t)
	require.NoError(t, rc.XAdd(ctx, &redis.XAddArgs{Stream: topic, Values: map[string]any{
		"_watermill_message_uuid": "old-1", "payload": "from before"}}).Err())
	b, err := Open(ctx, base+"?partitions=8", Options{})
	require.NoError(t, err)
	defer b.Close()
	sent := newMessages(5)
	publish(t, b, topic, sent)
	assert.Equal(t, "0", rc.Get(ctx, redisPartitionsKey(topic)).Val())
	assert.EqualValues(t, 6, rc.XLen(ctx, topic).Val())

	sub, err := b.Subscriber("g")
	require.NoError(t, err)
	n, err := sub.(PartitionSubscriber).Partitions(ctx, topic)
	require.NoError(t, err)
	assert.Zero(t, n)
	ch, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	require.Equal(t, "old-1", receive(ctx, t, ch, 1)[0].UUID)
	assertSame(t, sent, receive(ctx, t, ch, len(sent)), true)
}

func TestRedisPartitionsParam(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	_, err := Open(ctx, "redis://127.0.0.1:6379/0?partitions=many", Options{})
	require.ErrorContains(t, err, `partitions="many" is not a number from 0 to 256`)
}

// A member that stops reading a partition while it lives (the partition
// moved to another member) gives back what it held there: the other
// member gets it at its next claim round. Else the member's keep-alive
// would keep it for ever.
func TestRedisPartitionLeftIsGivenBack(t *testing.T) {
	t.Parallel()
	topic := "entoutbox.moved." + randomSuffix()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	b, err := Open(ctx, redisSetup(t, topic)+"?partitions=1", Options{})
	require.NoError(t, err)
	defer b.Close()
	sent := newMessages(3)
	publish(t, b, topic, sent)

	leaving, err := b.Subscriber("g")
	require.NoError(t, err)
	defer leaving.Close()
	lctx, stopReading := context.WithCancel(ctx)
	ch, err := leaving.(PartitionSubscriber).SubscribePartition(lctx, topic, 0)
	require.NoError(t, err)
	held := unacked(ctx, t, ch)
	require.Equal(t, sent[0].uuid, held.UUID)
	time.Sleep(300 * time.Millisecond) // the module reads ahead
	stopReading()
	for range ch { // until the subscription ends
	}

	taking, err := b.Subscriber("g")
	require.NoError(t, err)
	defer taking.Close()
	ch2, err := taking.(PartitionSubscriber).SubscribePartition(ctx, topic, 0)
	require.NoError(t, err)
	wctx, wcancel := context.WithTimeout(ctx, patience) // a claim round (1 s) normally; without the give-back, never
	defer wcancel()
	got := receive(wctx, t, ch2, len(sent))
	for _, m := range got {
		m.Ack()
	}
	assertSame(t, sent, got, false)
}

// A partition that moves away from a member and back to it before the
// member's first read of it ended (its consumer was slow to take what had
// been handed over: a hot aggregate's events waiting their turn) loses
// nothing: what the first read had taken from the stream and not handed
// over (read ahead) goes back to the group when that read ends, and the
// second read delivers it. Held by the member under the second read
// instead, kept alive and never handed over, it would never come again to
// anyone, and the aggregate would stall behind it.
func TestRedisPartitionReadAgainGetsWhatTheLastReadLeft(t *testing.T) {
	t.Parallel()
	topic := "entoutbox.again." + randomSuffix()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	b, err := Open(ctx, redisSetup(t, topic)+"?partitions=1", Options{})
	require.NoError(t, err)
	defer b.Close()
	sent := newMessages(8)
	publish(t, b, topic, sent)

	member, err := b.Subscriber("g")
	require.NoError(t, err)
	defer member.Close()
	ps := member.(PartitionSubscriber)
	fctx, stopFirst := context.WithCancel(ctx)
	first, err := ps.SubscribePartition(fctx, topic, 0)
	require.NoError(t, err)
	got := []*message.Message{unacked(ctx, t, first)}
	time.Sleep(300 * time.Millisecond) // the module reads ahead; the next one waits to be taken
	stopFirst()
	time.Sleep(300 * time.Millisecond) // the first read's loops end
	second, err := ps.SubscribePartition(ctx, topic, 0)
	require.NoError(t, err)
	for m := range first { // what the first read handed over, until it ends
		got = append(got, m)
	}
	wctx, wcancel := context.WithTimeout(ctx, time.Minute) // a claim round (1 s) normally
	defer wcancel()
	got = append(got, receive(wctx, t, second, len(sent)-len(got))...)
	for _, m := range got {
		m.Ack()
	}
	assertSame(t, sent, got, false)
	assertNothingMore(t, second, 1500*time.Millisecond)
}
