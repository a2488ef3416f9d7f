package broker

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A group reading by partition gets each message in the queue of its
// aggregate's partition, in publish order; what another producer sends
// without a partition key is the last partition's; a group reading the
// whole topic still gets every message.
func TestAMQPPartitionsRouteByAggregate(t *testing.T) {
	t.Parallel()
	topic := "entoutbox.parts." + randomSuffix()
	base := amqpSetup(t, topic)
	amqpQueues.add(topic, topic+"_g", topic+"_whole")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	b, err := Open(ctx, base, Options{})
	require.NoError(t, err)
	defer b.Close()

	ps := groupPartitions(ctx, t, b, topic, DefaultPartitions+1) // declares the group's queues
	wsub, err := b.Subscriber("whole")
	require.NoError(t, err)
	whole, err := wsub.Subscribe(ctx, topic)
	require.NoError(t, err)

	sent := aggregateMessages(40, 10)
	publish(t, b, topic, sent)
	byPartition := splitByPartition(sent, DefaultPartitions)
	require.Greater(t, len(byPartition), 1, "10 aggregates land in more than one partition")
	for k := range DefaultPartitions {
		requirePartition(ctx, t, ps, topic, k, byPartition[k], 200*time.Millisecond)
	}
	_, err = ps.SubscribePartition(ctx, topic, DefaultPartitions+1)
	require.ErrorContains(t, err, "no partition 17")

	// Another producer, no routing key: the rest.
	ch := amqpChannel(t)
	require.NoError(t, ch.PublishWithContext(ctx, topic, "", true, false, amqp.Publishing{
		MessageId: "foreign-1", Body: []byte("from elsewhere"),
		Headers: amqp.Table{"_watermill_message_uuid": "foreign-1"}}))
	rest, err := ps.SubscribePartition(ctx, topic, DefaultPartitions)
	require.NoError(t, err)
	require.Equal(t, "foreign-1", receive(ctx, t, rest, 1)[0].UUID)

	got := receive(ctx, t, whole, len(sent)+1)
	assertSame(t, sent, got[:len(sent)], true)
	assert.Equal(t, "foreign-1", got[len(sent)].UUID)
}

// A group whose whole-topic queue exists keeps reading it whole.
func TestAMQPWholeGroupStaysWhole(t *testing.T) {
	t.Parallel()
	topic := "entoutbox.whole." + randomSuffix()
	base := amqpSetup(t, topic)
	amqpQueues.add(topic, topic+"_g")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	b, err := Open(ctx, base, Options{})
	require.NoError(t, err)
	defer b.Close()
	first, err := b.Subscriber("g")
	require.NoError(t, err)
	sctx, stop := context.WithCancel(ctx)
	_, err = first.Subscribe(sctx, topic)
	require.NoError(t, err)
	stop()

	sub, err := b.Subscriber("g")
	require.NoError(t, err)
	n, err := sub.(PartitionSubscriber).Partitions(ctx, topic)
	require.NoError(t, err)
	assert.Zero(t, n)

	off, err := Open(ctx, base+"?partitions=0", Options{})
	require.NoError(t, err)
	defer off.Close()
	osub, err := off.Subscriber("h")
	require.NoError(t, err)
	n, err = osub.(PartitionSubscriber).Partitions(ctx, topic)
	require.NoError(t, err)
	assert.Zero(t, n, "?partitions=0")

	_, err = Open(ctx, base+"?partitions=8", Options{})
	require.ErrorContains(t, err, "a RabbitMQ topic has 16 partitions, or none with partitions=0")
}
