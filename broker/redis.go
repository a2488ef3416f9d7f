package broker

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"slices"
	"sync"
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
// The module's subscriber reads ahead of its consumer, and a member holds
// what it handed over until the consumer settles it (below), so when a
// member stops, the entries it had read but not settled stay pending
// under its name until another member claims them, once idle
// for redisClaimIdle (6 s; the module's own default is 60 s): they are
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
// The module hands a member one entry of a stream at a time and waits for
// its ack or nack before the next, and answers a nack by handing the same
// entry again at once. An event waiting for its aggregate's previous one,
// queued behind it, would wait for ever. So the member takes each entry
// over (takeOver: the module's XACK of it is not sent, the entry stays
// pending under the member, kept alive) and hands up to redisWindow of a
// stream out at once; settle XACKs an entry when the consumer acks it and
// gives it back to the group when it nacks it: its idle time set past the
// module's claim threshold, the next claim round of any member (every
// second) takes it, while this member moves on.

// redisAckTimeout bounds how long Close waits for the acks given before
// Close to be recorded (XACK) before it stops the module regardless, and
// how long an entry's hand-over waits for the module.
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
	client := newRedisMemberClient(redis.NewClient(&o), group, consumer)
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
		opts:     opts,
		topo:     topo,
		sub:      sub,
		client:   client,
		stopping: make(chan struct{}),
		settled:  make(chan struct{}),
		closed:   make(chan struct{}),
		topics:   map[string]int{},
		logger:   logger,
	}
	s.keeping.Add(1)
	go s.keepAlive()
	return s, nil
}

func newRedisMemberClient(c *redis.Client, group, consumer string) *redisMemberClient {
	return &redisMemberClient{Client: c, group: group, consumer: consumer, taking: map[string]handOver{},
		takingOver: map[string]*sync.Mutex{}, held: map[string]map[string]bool{}, reading: map[string]int{}}
}

// redisMemberClient is the module's client. It turns the module's XACK of
// an entry handed over into the entry's id for the member (takeOver), the
// entry staying pending until the consumer settles it, and keeps the ids
// of the entries the member holds (read or claimed, not yet acked or
// released) for keepAlive.
type redisMemberClient struct {
	*redis.Client
	group, consumer string

	mu sync.Mutex
	// takingOver is, per stream, held while one of its entries is handed
	// over (two subscriptions may read one stream): the module's next
	// XACK on the stream is that entry's.
	takingOver map[string]*sync.Mutex
	// taking is, per stream, the entry being handed over: the module's
	// XACK of its message (made with the message's context) gives its id.
	taking map[string]handOver
	held   map[string]map[string]bool // stream -> ids
	// reading counts, per stream, this member's subscriptions to it
	// (each a redisRead, which keeps what the module took for it).
	reading map[string]int
}

// redisRead is one subscription of the member to a stream. The module's
// read and claim loops outlive a subscription by a round (a BLOCK, a
// claim), and what they took and had not handed over when it ended they
// drop: the member would hold it, kept alive, and no member would ever
// deliver it. So the member notes, per subscription, what the module took
// for it and did not hand over yet (taken), gives that back to the group
// when the subscription ends, and gives back at once what the module
// takes for a subscription that ended, even when another subscription of
// the member reads the stream by then (a partition that moved away and
// back).
type redisRead struct {
	stream string
	ended  bool
	taken  map[string]bool // ids taken by the module, not handed over
}

// redisReadKey is the context key of the redisRead the module's calls
// are made for: the module makes them with (contexts derived from) the
// one its Subscribe was given.
type redisReadKey struct{}

func readOf(ctx context.Context) *redisRead {
	r, _ := ctx.Value(redisReadKey{}).(*redisRead)
	return r
}

// startReading counts a subscription to stream and returns it.
func (c *redisMemberClient) startReading(stream string) *redisRead {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reading[stream]++
	return &redisRead{stream: stream, taken: map[string]bool{}}
}

// stopReading ends r and returns the ids the member no longer holds for
// it, which the caller gives back: what the module took for r and did not
// hand over, and, after the last subscription to the stream, every id
// the member held on it (handed over and not settled too). One step under
// mu with hold, so that nothing is held for r after this.
func (c *redisMemberClient) stopReading(r *redisRead) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	r.ended = true
	ids := make([]string, 0, len(r.taken))
	for id := range r.taken {
		ids = append(ids, id)
	}
	r.taken = nil
	c.reading[r.stream]--
	if c.reading[r.stream] > 0 {
		return ids
	}
	delete(c.reading, r.stream)
	for id := range c.held[r.stream] {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	delete(c.held, r.stream)
	return ids
}

// handedOver notes that id, taken for r, was handed over: the consumer
// settles it.
func (c *redisMemberClient) handedOver(r *redisRead, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(r.taken, id)
}

// hold holds msgs of stream, taken by the module for the subscription of
// ctx, if that subscription has not ended (without one, if any
// subscription reads the stream).
func (c *redisMemberClient) hold(ctx context.Context, stream string, msgs []redis.XMessage) bool {
	r := readOf(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if r != nil && (r.ended || r.stream != stream) || c.reading[stream] == 0 {
		return false
	}
	if c.held[stream] == nil {
		c.held[stream] = map[string]bool{}
	}
	for _, m := range msgs {
		c.held[stream][m.ID] = true
		if r != nil {
			r.taken[m.ID] = true
		}
	}
	return true
}

// giveBack releases ids of stream to the group (idle past the claim
// threshold: the next claim round of any member takes them) and stops
// holding them.
func (c *redisMemberClient) giveBack(ctx context.Context, stream string, ids []string) error {
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

// takeOver makes the consumer, not the module, the one to settle m, the
// module's message of stream: it acks m, and the module's XACK that
// follows is not sent (XAck) but gives the entry's id, which stays pending
// under this member until settle acks or releases it. The module then
// hands the next entry over at once instead of waiting for the consumer.
// It reports false when the module did not XACK within redisAckTimeout:
// the subscription ended, and the module, its message's context ended
// too, may drop the message without its XACK. The entry then stays
// pending, held, and is given back when the subscription's end is told
// (ended) or at Close; an XACK that comes later is given back too (XAck).
func (c *redisMemberClient) takeOver(stream string, m *message.Message) (string, bool) {
	c.mu.Lock()
	one := c.takingOver[stream]
	if one == nil {
		one = &sync.Mutex{}
		c.takingOver[stream] = one
	}
	c.mu.Unlock()
	one.Lock()
	defer one.Unlock()
	ch := make(chan string, 1)
	c.mu.Lock()
	c.taking[stream] = handOver{ctx: m.Context(), id: ch}
	c.mu.Unlock()
	m.Ack()
	select {
	case id := <-ch:
		return id, true
	case <-time.After(redisAckTimeout):
		c.mu.Lock()
		delete(c.taking, stream)
		c.mu.Unlock()
		return "", false
	}
}

// handOver is an entry being handed over: the context of its message,
// and where its id goes.
type handOver struct {
	ctx context.Context
	id  chan string
}

// XAck is the module's, and is never sent: the XACK of an entry handed
// over (takeOver) gives its id to the hand-over, and any other (a
// hand-over that gave up waiting for it, or an entry the module's claim
// found deleted from the stream) gives the entry back to the group, so
// that no entry is acknowledged before the consumer settled it.
func (c *redisMemberClient) XAck(ctx context.Context, stream, group string, ids ...string) *redis.IntCmd {
	c.mu.Lock()
	h, taking := c.taking[stream]
	// The module XACKs a message with the context it gave the message: a
	// late XACK of an earlier message, whose hand-over gave up waiting,
	// is not this hand-over's, and its entry goes back to the group.
	mine := taking && h.ctx == ctx && len(ids) == 1
	if mine {
		delete(c.taking, stream)
	}
	c.mu.Unlock()
	cmd := redis.NewIntCmd(ctx)
	if mine {
		h.id <- ids[0]
		cmd.SetVal(1)
		return cmd
	}
	if err := c.giveBack(ctx, stream, ids); err != nil {
		cmd.SetErr(err) // the module tries again
		return cmd
	}
	cmd.SetVal(int64(len(ids)))
	return cmd
}

// ack XACKs an entry the consumer acked, retrying until it is recorded or
// the subscriber stopped (the entry then stays pending: another member
// may deliver it again, which dedupe absorbs).
func (c *redisMemberClient) ack(stream, id string, stopped <-chan struct{}) error {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), redisAckTimeout)
		err := c.Client.XAck(ctx, stream, c.group, id).Err()
		cancel()
		if err == nil {
			c.forget(stream, []string{id})
			return nil
		}
		select {
		case <-stopped:
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// XReadGroup and XClaim note the entries the module takes: the member
// holds them until it acks or releases them. For a subscription that
// ended (or on a stream no subscription of this member reads any more),
// they give what they took back instead.
func (c *redisMemberClient) XReadGroup(ctx context.Context, a *redis.XReadGroupArgs) *redis.XStreamSliceCmd {
	cmd := c.Client.XReadGroup(ctx, a)
	kept := cmd.Val()[:0]
	for _, xs := range cmd.Val() {
		if c.hold(ctx, xs.Stream, xs.Messages) {
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

func (c *redisMemberClient) XClaim(ctx context.Context, a *redis.XClaimArgs) *redis.XMessageSliceCmd {
	cmd := c.Client.XClaim(ctx, a)
	if !c.hold(ctx, a.Stream, cmd.Val()) {
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

func (c *redisMemberClient) forget(stream string, ids []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		delete(c.held[stream], id)
	}
}

// holding returns the ids of the entries the member holds, per stream.
func (c *redisMemberClient) holding() map[string][]string {
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
	client *redisMemberClient

	logger     watermill.LoggerAdapter
	stopping   chan struct{} // Close started: hand nothing more over
	settled    chan struct{} // Close waits for no more settling: what is not settled stays pending
	closed     chan struct{} // Close is done
	forwarders sync.WaitGroup
	settling   sync.WaitGroup // settle
	keeping    sync.WaitGroup // keepAlive
	closeOnce  sync.Once
	closeErr   error

	mu      sync.Mutex
	stopped bool
	topics  map[string]int // Subscribe calls per topic
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
	r := s.client.startReading(topic)
	in, err := s.sub.Subscribe(context.WithValue(ctx, redisReadKey{}, r), topic)
	if err != nil {
		_ = s.client.stopReading(r)
		s.mu.Lock()
		s.topics[topic]--
		s.mu.Unlock()
		s.forwarders.Done()
		return nil, err
	}
	out := make(chan *message.Message)
	go s.forward(ctx, r, in, out)
	return out, nil
}

// redisWindow is how many entries of one stream a subscription hands over
// and has not had settled: the consumer applies an aggregate's events held
// here as a run, and one waiting for an earlier one no longer stops those
// behind it (the module alone hands one entry at a time and waits for
// its ack: after a kill, a hot aggregate's successors, read first, each
// waited out GapWait before their predecessors came, about one event a
// second).
const redisWindow = 64

// forward hands a copy of each of the module's messages over, settled by
// the consumer through settle (takeOver), up to redisWindow at a time.
// A copy's context is the subscription's: the module's message's ends
// once it is acked.
func (s *redisSubscriber) forward(ctx context.Context, r *redisRead, in <-chan *message.Message, out chan<- *message.Message) {
	topic := r.stream
	defer s.forwarders.Done()
	defer close(out)
	window := make(chan struct{}, redisWindow)
	for {
		select {
		case <-s.stopping:
			return
		case window <- struct{}{}:
		}
		var m *message.Message
		select {
		case <-s.stopping:
			return
		case got, ok := <-in:
			if !ok {
				s.ended(r)
				return
			}
			m = got
		}
		c := m.Copy()
		c.SetContext(ctx)
		id, ok := s.client.takeOver(topic, m)
		if !ok {
			<-window
			continue // the subscription ends: in closes, and ended gives the entry back
		}
		s.client.handedOver(r, id)
		select {
		case out <- c:
			s.settling.Add(1)
			go s.settle(topic, id, c, window)
		case <-s.stopping:
			return // pending under this member: Close gives it back
		}
	}
}

// settle XACKs the entry id of topic when the consumer acks c, and gives
// it back to the group when it nacks c: the next claim round of any
// member takes it. (A nack delay, events.MetaNackDelay, is not honoured:
// a released successor came back long after its predecessor.) An entry
// not settled before Close stays pending, given back by Close.
func (s *redisSubscriber) settle(topic, id string, c *message.Message, window <-chan struct{}) {
	defer s.settling.Done()
	defer func() { <-window }()
	acked := false
	select {
	case <-c.Acked():
		acked = true
	case <-c.Nacked():
	case <-s.settled:
		select {
		case <-c.Acked(): // acked just before Close
			acked = true
		default:
			return
		}
	}
	if acked {
		if err := s.client.ack(topic, id, s.closed); err != nil {
			s.logger.Error("Cannot acknowledge a Redis entry; it stays pending and may come again", err,
				watermill.LogFields{"stream": topic, "id": id})
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), redisAckTimeout)
	defer cancel()
	if err := s.client.giveBack(ctx, topic, []string{id}); err != nil {
		s.logger.Debug("Cannot give a nacked Redis entry back; another member claims it once idle",
			watermill.LogFields{"stream": topic, "id": id, "error": err.Error()})
	}
}

// ended is told that the subscription r ended while the member lives (its
// partition moved to another member): what the module took for it and did
// not hand over goes back to the group, and, once no subscription of this
// member reads the stream, every entry it still holds there (handed over
// and not settled too), as at Close; keepAlive stops touching them. Else
// no member would ever take them: the member would keep them alive, even
// while another subscription of it reads the stream (the partition moved
// back to it), which reads only entries no member took.
func (s *redisSubscriber) ended(r *redisRead) {
	s.mu.Lock()
	s.topics[r.stream]--
	if s.topics[r.stream] <= 0 {
		delete(s.topics, r.stream)
	}
	s.mu.Unlock()
	held := s.client.stopReading(r)
	ctx, cancel := context.WithTimeout(context.Background(), redisAckTimeout)
	defer cancel()
	if err := s.client.giveBack(ctx, r.stream, held); err != nil {
		s.logger.Debug("Cannot give back the Redis entries of a stream this member stopped reading; "+
			"another member claims them once idle", watermill.LogFields{"stream": r.stream, "error": err.Error()})
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
		// What the consumer acked so far is XACKed; the rest stays pending
		// and is given back below.
		close(s.settled)
		waitGroupFor(&s.settling, redisAckTimeout)
		s.closeErr = s.sub.Close()
		// Outlast the module's last blocking read (BLOCK 100 ms).
		time.Sleep(redisstream.DefaultBlockTime + 50*time.Millisecond)
		s.releasePending()
		close(s.closed)
	})
	return s.closeErr
}

// waitGroupFor waits for wg, at most d.
func waitGroupFor(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
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
