package broker

import (
	"context"
	"strings"
	"testing"

	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
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
