package broker

import (
	"context"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// Redis partitions: a topic T split into n partitions is the streams T.~0
// ... T.~(n-1) (n from ?partitions=, default 16), each message in the one
// of its aggregate (PartitionOf); a group's members each read their share
// of them, through the group's consumer group on each stream. The key
// T.~partitions says how T is split; the first publisher or subscriber to
// touch T writes it, from its URL, and every other one reads it, so all
// agree whatever their URLs say. A topic whose stream T existed before
// (made by an earlier version of this package, by another producer) is
// kept whole: n = 0, the stream T alone, as before.
//
// The stream T itself stays readable on a split topic, for producers other
// than this package's (XADD to T): it is one more partition, numbered n.
// Subscribe reads all n+1 streams of a split topic, so a reader of the
// whole topic still gets every message (in order per aggregate: one
// aggregate is in one stream).

// redisMaxPartitions bounds ?partitions=: each partition a member reads is
// a blocking read and a claim loop of its own.
const redisMaxPartitions = 256

// redisPartitionsKey is the key saying how many partitions topic has.
func redisPartitionsKey(topic string) string { return topic + "." + partitionMark + "partitions" }

// redisPartitionStream is the stream of partition k of a topic split into
// n: the topic's own stream for k == n.
func redisPartitionStream(topic string, n, k int) string {
	if k == n {
		return topic
	}
	return partitionName(topic, k)
}

// redisSplit decides how a topic is split, once: the count already
// written, else 0 if the topic's whole stream exists, else ARGV[1].
var redisSplit = redis.NewScript(`
local n = redis.call('GET', KEYS[1])
if n then return tonumber(n) end
if redis.call('EXISTS', KEYS[2]) == 1 then n = 0 else n = tonumber(ARGV[1]) end
redis.call('SET', KEYS[1], n)
return n
`)

// redisTopology knows how the topics are split.
type redisTopology struct {
	client *redis.Client
	want   int // for topics not split yet

	mu    sync.Mutex
	split map[string]int
}

func (t *redisTopology) partitions(ctx context.Context, topic string) (int, error) {
	t.mu.Lock()
	n, ok := t.split[topic]
	t.mu.Unlock()
	if ok {
		return n, nil
	}
	n, err := bounded(ctx, func() (int, error) {
		return redisSplit.Run(ctx, t.client, []string{redisPartitionsKey(topic), topic}, t.want).Int()
	}, func(int) {})
	if err != nil {
		return 0, fmt.Errorf("reading how topic %q is split (key %q): %w", topic, redisPartitionsKey(topic), err)
	}
	t.mu.Lock()
	t.split[topic] = n
	t.mu.Unlock()
	return n, nil
}

// redisPublisher sends each message to its partition's stream.
type redisPublisher struct {
	pub  *redisstream.Publisher
	topo *redisTopology
}

func (p *redisPublisher) Publish(topic string, messages ...*message.Message) error {
	if len(messages) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(messages[0].Context(), connectTimeout)
	n, err := p.topo.partitions(ctx, topic)
	cancel()
	if err != nil {
		return err
	}
	if n == 0 {
		return p.pub.Publish(topic, messages...)
	}
	// In the given order, a run of one partition's messages at a time.
	start, k := 0, PartitionOf(messages[0].Metadata, messages[0].UUID, n)
	for end := 1; end <= len(messages); end++ {
		next := -1
		if end < len(messages) {
			next = PartitionOf(messages[end].Metadata, messages[end].UUID, n)
		}
		if next == k {
			continue
		}
		if err := p.pub.Publish(partitionName(topic, k), messages[start:end]...); err != nil {
			return err
		}
		start, k = end, next
	}
	return nil
}

func (p *redisPublisher) Close() error { return p.pub.Close() }

// Subscribe reads the whole topic: every stream of a split one.
func (s *redisSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	n, err := s.topo.partitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return s.subscribeStream(ctx, topic)
	}
	sctx, cancel := context.WithCancel(ctx)
	chans := make([]<-chan *message.Message, 0, n+1)
	for k := range n + 1 {
		ch, err := s.subscribeStream(sctx, redisPartitionStream(topic, n, k))
		if err != nil {
			cancel()
			return nil, err
		}
		chans = append(chans, ch)
	}
	return mergeMessages(sctx, cancel, chans), nil
}

// Partitions implements PartitionSubscriber: n and the topic's own stream.
func (s *redisSubscriber) Partitions(ctx context.Context, topic string) (int, error) {
	n, err := s.topo.partitions(ctx, topic)
	if err != nil || n == 0 {
		return 0, err
	}
	return n + 1, nil
}

// SubscribePartition implements PartitionSubscriber.
func (s *redisSubscriber) SubscribePartition(ctx context.Context, topic string, k int) (<-chan *message.Message, error) {
	n, err := s.topo.partitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	if n == 0 || k < 0 || k > n {
		return nil, fmt.Errorf("no partition %d of topic %q: it has %d and its own stream (%d)", k, topic, n, n)
	}
	return s.subscribeStream(ctx, redisPartitionStream(topic, n, k))
}

// mergeMessages hands over what chans deliver until they all close. One
// it cannot hand over because ctx ended is nacked: the member gives it
// back to the group.
func mergeMessages(ctx context.Context, done func(), chans []<-chan *message.Message) <-chan *message.Message {
	out := make(chan *message.Message)
	var wg sync.WaitGroup
	for _, ch := range chans {
		wg.Go(func() {
			for m := range ch {
				select {
				case out <- m:
				case <-ctx.Done():
					m.Nack()
				}
			}
		})
	}
	go func() {
		wg.Wait()
		done()
		close(out)
	}()
	return out
}

var _ PartitionSubscriber = (*redisSubscriber)(nil)
