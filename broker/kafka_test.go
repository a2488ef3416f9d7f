package broker

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/entoutbox/entoutbox/events"
)

// kafkaSetup starts an in-process Kafka cluster (franz-go's kfake) holding
// topic with three partitions.
func kafkaSetup(t *testing.T, topic string) string {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return "kafka://" + strings.Join(c.ListenAddrs(), ",")
}

// kafkaChecks reads the topic's records with franz-go and checks each is
// keyed by its aggregate id, and that an aggregate's records sit in one
// partition in publish order.
func kafkaChecks(ctx context.Context, t *testing.T, rawURL, topic, _ string) func([]sentMessage) {
	return func(sent []sentMessage) {
		cl, err := kgo.NewClient(
			kgo.SeedBrokers(strings.Split(strings.TrimPrefix(rawURL, "kafka://"), ",")...),
			kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		)
		require.NoError(t, err)
		defer cl.Close()

		index := map[string]int{}
		for i, m := range sent {
			index[m.uuid] = i
		}
		type place struct {
			partition int32
			offset    int64
			index     int
		}
		last := map[string]place{} // aggregate → its last record
		n := 0
		for n < len(sent) {
			fetches := cl.PollFetches(ctx)
			require.NoError(t, ctx.Err(), "read %d of %d records", n, len(sent))
			for _, fe := range fetches.Errors() {
				require.NoError(t, fe.Err)
			}
			fetches.EachRecord(func(r *kgo.Record) {
				n++
				var uuid, agg string
				for _, h := range r.Headers {
					switch h.Key {
					case wmkafka.UUIDHeaderKey:
						uuid = string(h.Value)
					case events.MetaAggregateID:
						agg = string(h.Value)
					}
				}
				i, ok := index[uuid]
				if !assert.True(t, ok, "record of unknown message %q", uuid) {
					return
				}
				assert.Equal(t, sent[i].metadata[events.MetaAggregateID], agg)
				assert.Equal(t, agg, string(r.Key), "key of message %d", i)
				if prev, ok := last[agg]; ok {
					assert.Equal(t, prev.partition, r.Partition, "%s spans partitions", agg)
					assert.Greater(t, r.Offset, prev.offset)
					assert.Greater(t, i, prev.index, "%s out of publish order", agg)
				}
				last[agg] = place{r.Partition, r.Offset, i}
			})
		}
		assert.Len(t, last, 5)
	}
}

// While a group's membership is stable, all records of one aggregate reach
// one member: the record key is the aggregate id, a key lives in one
// partition, and a partition belongs to one member. (Through a rebalance
// an aggregate may change members; the consumer's number check keeps its
// order then.)
func TestKafkaAggregateReachesOneMember(t *testing.T) {
	t.Parallel()
	const topic, group, aggregates, each = "one-member", "billing", 12, 10
	rawURL := kafkaSetup(t, topic)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	b, err := Open(ctx, rawURL, Options{})
	require.NoError(t, err)
	defer func() { assert.NoError(t, b.Close()) }()

	got := newSyncLists() // member -> the aggregates of the records it received, in order
	var received sync.WaitGroup
	received.Add(aggregates * each)
	for _, member := range []string{"m1", "m2"} {
		s, err := b.Subscriber(group)
		require.NoError(t, err)
		ch, err := s.Subscribe(ctx, topic)
		require.NoError(t, err)
		go func() {
			for m := range ch {
				got.add(member, m.Metadata.Get(events.MetaAggregateID)+"/"+string(m.Payload))
				m.Ack()
				received.Done()
			}
		}()
	}
	kafkaWaitStable(ctx, t, rawURL, group, 2)

	for i := range each {
		for a := range aggregates {
			m := message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))
			m.Metadata.Set(events.MetaAggregateID, fmt.Sprintf("invoice-%d", a))
			require.NoError(t, b.Publisher().Publish(topic, m))
		}
	}
	done := make(chan struct{})
	go func() { received.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("received %d and %d of %d records", len(got.get("m1")), len(got.get("m2")), aggregates*each)
	}

	memberOf := map[string]string{}
	for _, member := range []string{"m1", "m2"} {
		assert.NotEmpty(t, got.get(member), "member %s received nothing: the partitions were not shared", member)
		next := map[string]int{}
		for _, rec := range got.get(member) {
			agg, n, _ := strings.Cut(rec, "/")
			if other, ok := memberOf[agg]; ok && other != member {
				t.Errorf("%s reached %s and %s", agg, other, member)
			}
			memberOf[agg] = member
			assert.Equal(t, strconv.Itoa(next[agg]), n, "%s out of order at %s", agg, member)
			next[agg]++
		}
	}
	assert.Len(t, memberOf, aggregates)
}

// kafkaWaitStable waits until group is stable with members members, each
// with its partitions assigned, so that what is published next is not
// moved by a rebalance.
func kafkaWaitStable(ctx context.Context, t *testing.T, rawURL, group string, members int) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(strings.Split(strings.TrimPrefix(rawURL, "kafka://"), ","), sarama.NewConfig())
	require.NoError(t, err)
	defer admin.Close()
	var last string
	for ctx.Err() == nil {
		groups, err := admin.DescribeConsumerGroups([]string{group})
		if err == nil && len(groups) == 1 && groups[0].State == "Stable" && len(groups[0].Members) == members {
			assigned := 0
			for _, m := range groups[0].Members {
				if a, err := m.GetMemberAssignment(); err == nil && len(a.Topics) > 0 {
					assigned++
				}
			}
			if assigned == members {
				return
			}
		}
		if err == nil && len(groups) == 1 {
			last = fmt.Sprintf("state %s, %d members", groups[0].State, len(groups[0].Members))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("group %s not stable with %d members: %s", group, members, last)
}
