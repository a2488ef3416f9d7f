package broker

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// Redis Streams through watermill-redisstream: topic T is the stream key T
// and group G its consumer group G, created at the stream's first entry ("0")
// so that a new group also reads what was published before it.
//
// The module's subscriber reads one entry ahead of its consumer, so when a
// member stops, the entry it had read but not handed over stays pending
// under its name until another member claims it, once it has been idle
// for redisClaimIdle (6 s; the module's own default is 60 s): it is
// delivered late, never lost. redisSubscriber's Close gives such entries
// back to the group at once, and removes two other ways for Close to
// strand entries like that. A process that dies without Close leaves its
// entries for redisClaimIdle: a killed instance costs seconds, not a
// minute. So that a live member's entries are not claimed from it while
// its handler runs or waits (an event waiting for its aggregate's previous
// one waits up to GapWait, and more), it touches the entries it holds
// every redisKeepAlive (XCLAIM to itself, JUSTID: their idle time starts
// again, their delivery count stays). Members gone for redisConsumerTimeout
// with nothing pending are removed from the group (the module's check,
// every redisCheckConsumers): each instance's subscriber is a member of
// its own name, and a restart leaves the old one behind.
//
// The module's Publisher and Subscriber each close their client on Close, so
// each gets a client of its own, made from the same options.
//
// The module answers a nack by handing the same entry to the same member
// again, at once, for as long as it is nacked; the entries it read ahead
// wait behind it. A consumer that nacks an entry because it must come after
// another (an aggregate's next event, which may be one of those read ahead)
// would wait for ever. So a nack here gives the entry back to the group:
// it stays pending, its idle time set past the module's claim threshold,
// and the next claim round of any member (every second) takes it, while this
// member moves on.

// redisAckTimeout bounds how long Close waits for the module to record the
// acks given before Close (XACK) before it stops the module regardless.
const redisAckTimeout = 5 * time.Second

const (
	// redisClaimIdle is how long a pending entry is idle before another
	// member claims it: a dead member's entries come back after it.
	redisClaimIdle = 6 * time.Second
	// redisKeepAlive is how often a member touches the entries it holds,
	// well within redisClaimIdle.
	redisKeepAlive = 2 * time.Second
)

// redisConsumerTimeout is how long a member with nothing pending is idle
// before it is removed from its group, checked every redisCheckConsumers
// (variables for a test to shorten).
var (
	redisConsumerTimeout = 2 * time.Minute
	redisCheckConsumers  = 30 * time.Second
)

func openRedis(ctx context.Context, u *url.URL, raw string, logger watermill.LoggerAdapter) (*pubSub, error) {
	partitions, _, raw, err := partitionsParam(u, raw, redisMaxPartitions)
	if err != nil {
		return nil, err
	}
	opts, err := redis.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("parsing URL: %w", err)
	}
	o := *opts // NewClient fills in defaults: one copy per client
	client := redis.NewClient(&o)
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	// go-redis leaves ctx aside once connected (socket timeouts rule unless
	// ContextTimeoutEnabled, which would also cut the subscriber's blocking
	// reads): bound the PING from outside.
	_, err = bounded(pctx, func() (struct{}, error) { return struct{}{}, client.Ping(pctx).Err() }, func(struct{}) {})
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("connecting: %w", err)
	}
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: client}, logger)
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("creating publisher: %w", err)
	}
	to := *opts
	topo := &redisTopology{client: redis.NewClient(&to), want: partitions, split: map[string]int{}}
	return &pubSub{
		pub: &redisPublisher{pub: pub, topo: topo},
		ping: func(ctx context.Context) error {
			_, err := bounded(ctx, func() (struct{}, error) { return struct{}{}, client.Ping(ctx).Err() }, func(struct{}) {})
			if err != nil {
				return fmt.Errorf("PING failed: %w", err)
			}
			return nil
		},
		newSub: func(group string) (message.Subscriber, error) {
			return newRedisSubscriber(opts, topo, group, logger)
		},
		closers: []func() error{topo.client.Close},
	}, nil
}

func newRedisSubscriber(opts *redis.Options, topo *redisTopology, group string, logger watermill.LoggerAdapter) (message.Subscriber, error) {
	o := *opts
	if o.PoolSize == 0 {
		// Each stream read (a partition) blocks a connection for up to
		// BLOCK 100 ms; go-redis's default pool is 10 per CPU.
		o.PoolSize = 10*runtime.GOMAXPROCS(0) + 2*(DefaultPartitions+1)
	}
	consumer := watermill.NewShortUUID()
	client := &ackCountingClient{Client: redis.NewClient(&o), group: group, consumer: consumer,
		release: map[string]int{}, held: map[string]map[string]bool{}, reading: map[string]int{}}
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client:        client,
		Consumer:      consumer,
		ConsumerGroup: group,
		// A released entry (a nack) comes back within a claim round.
		ClaimInterval:          time.Second,
		MaxIdleTime:            redisClaimIdle,
		CheckConsumersInterval: redisCheckConsumers,
		ConsumerTimeout:        redisConsumerTimeout,
		OldestId:               "0",
		// Otherwise the first read blocks with no timeout and Close cannot
		// stop it.
		DisableIndefiniteInitialBlock: true,
	}, logger)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	s := &redisSubscriber{
		opts:      opts,
		topo:      topo,
		sub:       sub,
		client:    client,
		stopping:  make(chan struct{}),
		closed:    make(chan struct{}),
		topics:    map[string]int{},
		delivered: map[*message.Message]string{},
		logger:    logger,
	}
	s.keeping.Add(1)
	go s.keepAlive()
	return s, nil
}

// ackCountingClient counts the XACKs the module's subscriber made, turns
// the XACK of an entry the consumer nacked into its release to the group,
// and keeps the ids of the entries the member holds (read or claimed, not
// yet acked or released) for keepAlive.
type ackCountingClient struct {
	*redis.Client
	group, consumer string
	xacks           atomic.Int64

	mu sync.Mutex
	// release is, per stream, the next XACKs on it that are releases.
	// A release is claimed again at the next claim round: a nack delay
	// (events.MetaNackDelay) is not honoured here. A member holds one
	// entry at a time and takes claimed entries one by one, so a delayed
	// successor came back long after its predecessor (a kill test drained
	// in 28 s without the delay, and had events left after 5 min with it).
	release map[string]int
	held    map[string]map[string]bool // stream -> ids
	// reading counts, per stream, this member's subscriptions to it. The
	// module's read and claim loops outlive a subscription by a round
	// (a BLOCK, a claim): what they take from a stream no subscription
	// reads any more is given back to the group at once, not held.
	reading map[string]int
}

// startReading and stopReading count a subscription to stream; stopReading
// says whether it was the last.
func (c *ackCountingClient) startReading(stream string) {
	c.mu.Lock()
	c.reading[stream]++
	c.mu.Unlock()
}

// stopReading also returns, after the last subscription, the ids the
// member held on stream, which it holds no more: the caller gives them
// back. (One step under mu with holdIfReading, so that nothing is held
// after this.)
func (c *ackCountingClient) stopReading(stream string) (bool, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reading[stream]--
	if c.reading[stream] > 0 {
		return false, nil
	}
	delete(c.reading, stream)
	var ids []string
	for id := range c.held[stream] {
		ids = append(ids, id)
	}
	delete(c.held, stream)
	return true, ids
}

// holdIfReading holds msgs of stream if a subscription reads it.
func (c *ackCountingClient) holdIfReading(stream string, msgs []redis.XMessage) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reading[stream] == 0 {
		return false
	}
	if c.held[stream] == nil {
		c.held[stream] = map[string]bool{}
	}
	for _, m := range msgs {
		c.held[stream][m.ID] = true
	}
	return true
}

// giveBack releases ids of stream to the group (idle past the claim
// threshold: the next claim round of any member takes them) and stops
// holding them.
func (c *ackCountingClient) giveBack(ctx context.Context, stream string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	c.forget(stream, ids)
	args := []any{"XCLAIM", stream, c.group, c.consumer, 0}
	for _, id := range ids {
		args = append(args, id)
	}
	return c.Client.Do(ctx, append(args, "IDLE", redisReleasedIdle.Milliseconds(), "JUSTID")...).Err()
}

// redisReleasedIdle is the idle time a released entry is given: past the
// claim threshold, so that the next claim round takes it.
const redisReleasedIdle = time.Hour

// releaseNext makes the module's next XACK on stream a release. The module
// hands over one entry of a stream at a time and XACKs it before the next,
// so the next XACK is the nacked entry's.
func (c *ackCountingClient) releaseNext(stream string) {
	c.mu.Lock()
	c.release[stream]++
	c.mu.Unlock()
}

func (c *ackCountingClient) XAck(ctx context.Context, stream, group string, ids ...string) *redis.IntCmd {
	c.mu.Lock()
	release := c.release[stream] > 0
	if release {
		c.release[stream]--
	}
	c.mu.Unlock()
	if release {
		cmd := redis.NewIntCmd(ctx)
		args := []any{"XCLAIM", stream, group, c.consumer, 0}
		for _, id := range ids {
			args = append(args, id)
		}
		args = append(args, "IDLE", redisReleasedIdle.Milliseconds(), "JUSTID")
		if err := c.Client.Do(ctx, args...).Err(); err != nil {
			cmd.SetErr(err) // the module retries, and releases on its retry
			c.mu.Lock()
			c.release[stream]++
			c.mu.Unlock()
			return cmd
		}
		c.forget(stream, ids)
		c.xacks.Add(1)
		cmd.SetVal(int64(len(ids)))
		return cmd
	}
	cmd := c.Client.XAck(ctx, stream, group, ids...)
	if cmd.Err() == nil {
		c.forget(stream, ids)
		c.xacks.Add(1)
	}
	return cmd
}

// XReadGroup and XClaim note the entries the module takes: the member
// holds them until it acks or releases them.
// On a stream no subscription of this member reads any more, they give
// what they took back instead.
func (c *ackCountingClient) XReadGroup(ctx context.Context, a *redis.XReadGroupArgs) *redis.XStreamSliceCmd {
	cmd := c.Client.XReadGroup(ctx, a)
	kept := cmd.Val()[:0]
	for _, xs := range cmd.Val() {
		if c.holdIfReading(xs.Stream, xs.Messages) {
			kept = append(kept, xs)
			continue
		}
		_ = c.giveBack(context.WithoutCancel(ctx), xs.Stream, messageIDs(xs.Messages)) // else claimed once idle
	}
	if len(kept) < len(cmd.Val()) {
		cmd.SetVal(kept)
	}
	return cmd
}

func (c *ackCountingClient) XClaim(ctx context.Context, a *redis.XClaimArgs) *redis.XMessageSliceCmd {
	cmd := c.Client.XClaim(ctx, a)
	if !c.holdIfReading(a.Stream, cmd.Val()) {
		_ = c.giveBack(context.WithoutCancel(ctx), a.Stream, messageIDs(cmd.Val()))
		cmd.SetVal(nil)
	}
	return cmd
}

func messageIDs(msgs []redis.XMessage) []string {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids
}

func (c *ackCountingClient) forget(stream string, ids []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		delete(c.held[stream], id)
	}
}

// holding returns the ids of the entries the member holds, per stream.
func (c *ackCountingClient) holding() map[string][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]string{}
	for stream, ids := range c.held {
		for id := range ids {
			out[stream] = append(out[stream], id)
		}
	}
	return out
}

// keepAlive touches the entries the member holds every redisKeepAlive
// until Close, so that no other member claims them while it lives.
func (s *redisSubscriber) keepAlive() {
	defer s.keeping.Done()
	tick := time.NewTicker(redisKeepAlive)
	defer tick.Stop()
	for {
		select {
		case <-s.stopping:
			return
		case <-tick.C:
		}
		for stream, ids := range s.client.holding() {
			ctx, cancel := context.WithTimeout(context.Background(), redisKeepAlive)
			// JUSTID: the idle time starts again, the delivery count stays.
			err := s.client.XClaimJustID(ctx, &redis.XClaimArgs{Stream: stream, Group: s.client.group,
				Consumer: s.client.consumer, MinIdle: 0, Messages: ids}).Err()
			cancel()
			if err != nil && !errors.Is(err, redis.Nil) {
				s.logger.Debug("Cannot touch the Redis entries this member holds; another member may claim them",
					watermill.LogFields{"stream": stream, "group": s.client.group, "error": err.Error()})
			}
		}
	}
}

// redisSubscriber hands the module's messages over and closes it in an order
// that keeps two things from stranding an entry for 60 s:
//   - the module skips the XACK of a message acked just before Close (its
//     retry loop does not start once it is closing), which would bring the
//     message back a minute later;
//   - the module's Close does not wait for its last XREADGROUP, which blocks
//     on the server for up to 100 ms and would take an entry published
//     meanwhile, after Close returned.
type redisSubscriber struct {
	opts   *redis.Options
	topo   *redisTopology
	sub    *redisstream.Subscriber
	client *ackCountingClient

	logger     watermill.LoggerAdapter
	stopping   chan struct{} // Close started: hand nothing more over
	closed     chan struct{} // Close is done
	forwarders sync.WaitGroup
	keeping    sync.WaitGroup // keepAlive
	closeOnce  sync.Once
	closeErr   error

	mu        sync.Mutex
	stopped   bool
	topics    map[string]int              // Subscribe calls per topic
	delivered map[*message.Message]string // the consumer's copies not yet settled -> their topic
	acked     int64                       // settled (acked, or nacked and released), out of delivered
}

// subscribeStream reads one stream: a topic kept whole, or a partition.
func (s *redisSubscriber) subscribeStream(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil, errors.New("subscriber closed")
	}
	s.forwarders.Add(1)
	s.topics[topic]++
	s.mu.Unlock()
	s.client.startReading(topic)
	in, err := s.sub.Subscribe(ctx, topic)
	if err != nil {
		_, _ = s.client.stopReading(topic)
		s.mu.Lock()
		s.topics[topic]--
		s.mu.Unlock()
		s.forwarders.Done()
		return nil, err
	}
	out := make(chan *message.Message)
	go s.forward(topic, in, out)
	return out, nil
}

// forward hands a copy of each of the module's messages over, so that a
// nack of it can release the entry (see the top of the file) instead of
// bringing it back to this member at once.
func (s *redisSubscriber) forward(topic string, in <-chan *message.Message, out chan<- *message.Message) {
	defer s.forwarders.Done()
	defer close(out)
	for {
		select {
		case <-s.stopping:
			return
		case m, ok := <-in:
			if !ok {
				s.ended(topic)
				return
			}
			c := m.Copy()
			c.SetContext(m.Context())
			s.mu.Lock()
			s.delivered[c] = topic
			s.mu.Unlock()
			select {
			case out <- c:
				go s.settle(topic, c, m)
			case <-s.stopping:
				s.mu.Lock()
				delete(s.delivered, c)
				s.mu.Unlock()
				return // the module keeps m pending; another member claims it
			}
		}
	}
}

// settle passes the consumer's ack of c on to m, and its nack as a release
// of the entry (or, on a topic subscribed twice, where the release could
// take the other subscription's XACK, as the module's nack).
func (s *redisSubscriber) settle(topic string, c, m *message.Message) {
	select {
	case <-c.Acked():
	case <-c.Nacked():
		s.mu.Lock()
		alone := s.topics[topic] == 1
		s.mu.Unlock()
		if !alone {
			s.forget(c, false)
			m.Nack()
			return
		}
		s.client.releaseNext(topic)
	case <-s.closed:
		return
	}
	s.forget(c, true)
	m.Ack()
}

// ended is told that a subscription to stream ended while the member
// lives (its partition moved to another member): once no subscription of
// this member reads the stream, the entries it still holds there (read
// ahead, or handed over and not settled) go back to the group, as at
// Close, and keepAlive stops touching them; else no other member would
// ever take them.
func (s *redisSubscriber) ended(stream string) {
	s.mu.Lock()
	s.topics[stream]--
	if s.topics[stream] <= 0 {
		delete(s.topics, stream)
	}
	s.mu.Unlock()
	last, held := s.client.stopReading(stream)
	if !last {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), redisAckTimeout)
	defer cancel()
	if err := s.client.giveBack(ctx, stream, held); err != nil {
		s.logger.Debug("Cannot give back the Redis entries of a stream this member stopped reading; "+
			"another member claims them once idle", watermill.LogFields{"stream": stream, "error": err.Error()})
	}
}

func (s *redisSubscriber) forget(c *message.Message, settled bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, in := s.delivered[c]; in {
		delete(s.delivered, c)
		if settled {
			s.acked++
		}
	}
}

func (s *redisSubscriber) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
		close(s.stopping)
		s.forwarders.Wait()
		s.keeping.Wait()

		// Let the module XACK every message acked so far before it closes.
		s.mu.Lock()
		want := s.acked
		for c, topic := range s.delivered {
			select {
			case <-c.Acked():
				want++
			case <-c.Nacked():
				if s.topics[topic] == 1 { // released, not nacked
					want++
				}
			default:
			}
		}
		s.mu.Unlock()
		deadline := time.Now().Add(redisAckTimeout)
		for s.client.xacks.Load() < want && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}

		s.closeErr = s.sub.Close()
		// Outlast the module's last blocking read (BLOCK 100 ms).
		time.Sleep(redisstream.DefaultBlockTime + 50*time.Millisecond)
		s.releasePending()
		close(s.closed)
	})
	return s.closeErr
}

// releasePending gives the group back the entries still pending under this
// member's name once the module stopped (read ahead, or handed over and
// not acked): the other members' next claim round takes them, instead of
// the one after they have been idle for 60 s. Best effort: an entry it
// misses is claimed then.
func (s *redisSubscriber) releasePending() {
	o := *s.opts
	c := redis.NewClient(&o) // the module closed its own
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), redisAckTimeout)
	defer cancel()
	s.mu.Lock()
	topics := make([]string, 0, len(s.topics))
	for t := range s.topics {
		topics = append(topics, t)
	}
	s.mu.Unlock()
	for _, topic := range topics {
		pending, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: topic, Group: s.client.group,
			Start: "-", End: "+", Count: 10000, Consumer: s.client.consumer}).Result()
		if err != nil || len(pending) == 0 {
			continue
		}
		args := []any{"XCLAIM", topic, s.client.group, s.client.consumer, 0}
		for _, p := range pending {
			args = append(args, p.ID)
		}
		_ = c.Do(ctx, append(args, "IDLE", redisReleasedIdle.Milliseconds(), "JUSTID")...).Err()
	}
}
