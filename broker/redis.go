package broker

import (
	"context"
	"errors"
	"fmt"
	"net/url"
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
// under its name until another member claims it, after the module's idle
// time of 60 s: it is delivered late, never lost. redisSubscriber removes two
// other ways for Close to strand entries like that.
//
// The module's Publisher and Subscriber each close their client on Close, so
// each gets a client of its own, made from the same options.

// redisAckTimeout bounds how long Close waits for the module to record the
// acks given before Close (XACK) before it stops the module regardless.
const redisAckTimeout = 5 * time.Second

func openRedis(ctx context.Context, _ *url.URL, raw string, logger watermill.LoggerAdapter) (*pubSub, error) {
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
	return &pubSub{
		pub: pub,
		ping: func(ctx context.Context) error {
			_, err := bounded(ctx, func() (struct{}, error) { return struct{}{}, client.Ping(ctx).Err() }, func(struct{}) {})
			if err != nil {
				return fmt.Errorf("PING failed: %w", err)
			}
			return nil
		},
		newSub: func(group string) (message.Subscriber, error) { return newRedisSubscriber(opts, group, logger) },
	}, nil
}

func newRedisSubscriber(opts *redis.Options, group string, logger watermill.LoggerAdapter) (message.Subscriber, error) {
	o := *opts
	client := &ackCountingClient{Client: redis.NewClient(&o)}
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client:        client,
		ConsumerGroup: group,
		OldestId:      "0",
		// Otherwise the first read blocks with no timeout and Close cannot
		// stop it.
		DisableIndefiniteInitialBlock: true,
	}, logger)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return &redisSubscriber{
		sub:       sub,
		client:    client,
		stopping:  make(chan struct{}),
		closed:    make(chan struct{}),
		delivered: map[*message.Message]struct{}{},
	}, nil
}

// ackCountingClient counts the XACKs the module's subscriber made.
type ackCountingClient struct {
	*redis.Client
	xacks atomic.Int64
}

func (c *ackCountingClient) XAck(ctx context.Context, stream, group string, ids ...string) *redis.IntCmd {
	cmd := c.Client.XAck(ctx, stream, group, ids...)
	if cmd.Err() == nil {
		c.xacks.Add(1)
	}
	return cmd
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
	sub    *redisstream.Subscriber
	client *ackCountingClient

	stopping   chan struct{} // Close started: hand nothing more over
	closed     chan struct{} // Close is done
	forwarders sync.WaitGroup
	closeOnce  sync.Once
	closeErr   error

	mu        sync.Mutex
	stopped   bool
	delivered map[*message.Message]struct{} // handed over, not yet acked or nacked
	acked     int64                         // acked by the consumer, out of delivered
}

func (s *redisSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil, errors.New("subscriber closed")
	}
	s.forwarders.Add(1)
	s.mu.Unlock()
	in, err := s.sub.Subscribe(ctx, topic)
	if err != nil {
		s.forwarders.Done()
		return nil, err
	}
	out := make(chan *message.Message)
	go s.forward(in, out)
	return out, nil
}

func (s *redisSubscriber) forward(in <-chan *message.Message, out chan<- *message.Message) {
	defer s.forwarders.Done()
	defer close(out)
	for {
		select {
		case <-s.stopping:
			return
		case m, ok := <-in:
			if !ok {
				return
			}
			s.mu.Lock()
			s.delivered[m] = struct{}{}
			s.mu.Unlock()
			select {
			case out <- m:
				go s.settle(m)
			case <-s.stopping:
				s.mu.Lock()
				delete(s.delivered, m)
				s.mu.Unlock()
				return // the module keeps m pending; another member claims it
			}
		}
	}
}

// settle moves m out of delivered once the consumer acks or nacks it.
func (s *redisSubscriber) settle(m *message.Message) {
	var ok bool
	select {
	case <-m.Acked():
		ok = true
	case <-m.Nacked():
	case <-s.closed:
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, in := s.delivered[m]; in {
		delete(s.delivered, m)
		if ok {
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

		// Let the module XACK every message acked so far before it closes.
		s.mu.Lock()
		want := s.acked
		for m := range s.delivered {
			select {
			case <-m.Acked():
				want++
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
		close(s.closed)
	})
	return s.closeErr
}
