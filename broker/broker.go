// Package broker opens a Watermill Pub/Sub named by a URL, so that a relay
// or an example can be pointed at any broker from a flag or an environment
// variable without code of its own per broker.
//
// URL forms:
//
//	nats://host:4222[,host2:4222]       NATS JetStream; ?ack_wait=30s sets the redelivery wait, ?max_in_flight=128
//	                                    the messages a subscription holds at once, ?max_ack_pending=1000 those a
//	                                    group holds (see below), ?partitions=16 how a new topic is split
//	amqp://user:pass@host:5672/[vhost]  RabbitMQ (watermill-amqp/v3); amqps:// for TLS; ?partitions=0 turns keys off
//	redis://[:pass@]host:6379/0         Redis Streams (watermill-redisstream); rediss:// for TLS; ?partitions=16
//	kafka://host1:9092,host2:9092       Kafka (watermill-kafka/v3, Sarama)
//	postgres://user@host:5432/db        PostgreSQL tables (watermill-sql/v4); also postgresql://
//	mem://                              in-process (Watermill GoChannel); also inprocess://
//
// Open refuses, before connecting, a URL without the server (and, for
// postgres://, the database) it needs, rather than let the client library
// fall back to a local default. A postgres:// URL may name a socket
// directory with ?host= and the database with ?dbname= instead.
//
// A topic is the literal name of one destination, checked per broker by
// Publish and Subscribe before anything is made on the broker (see
// ValidateTopic): an invalid one is an *InvalidTopicError, which is
// permanent.
//
// Whatever the broker, a message keeps its UUID, payload and metadata from
// publisher to subscriber; a subscriber group shares its deliveries among its
// members and keeps its position when they restart; every delivery is acked
// on its own, and one not acked comes again (at-least-once, so consumers
// must tolerate duplicates). A group with one member receives an
// aggregate's messages in publish order (on Kafka also with several
// members: a partition goes to one member at a time; on NATS many at once,
// see below). The file of each
// scheme says how it maps topics and groups onto the broker's resources and
// what is particular to it.
//
// On NATS and Redis a topic T is split into partitions by aggregate
// (PartitionOf; ?partitions=, default DefaultPartitions, 0 keeps a new topic
// whole): NATS subjects, Redis streams T.~0 ... T.~(n-1), plus T itself for
// producers outside this package. The broker keeps the count once the topic
// exists. Subscribe reads every partition; a PartitionSubscriber reads one,
// for a group's members to divide them (the consumer package does). A
// subscriber outside the project reads T.* on NATS. On RabbitMQ the
// partition (of 16, or none with ?partitions=0) is the routing key, and a
// group reading by partition has a queue per partition (amqppartition.go).
//
// On NATS a subscription pulls its group's messages from JetStream, only
// as many as it has room for: it holds at most max_in_flight (default 128)
// received and not yet acked or nacked, and hands each out without waiting
// for the previous ones' acks, so that a Watermill router handles up to
// max_in_flight at once (see ConcurrentSubscriber). The rest wait on the
// server, where any member may take them. While it holds a message it
// tells JetStream every ack_wait / 2 that the message is in progress, so a
// message comes again only when it is nacked (at once), when its
// subscriber closes (at once: Close naks what it holds) or when its member
// is gone (after ack_wait, default 30 s), however long a handler takes.
// max_ack_pending bounds the messages a group's members hold together, on
// the server (default 1,000, JetStream's). The last URL to subscribe a
// group sets ack_wait and max_ack_pending for it.
package broker

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Options tune Open.
type Options struct {
	Logger watermill.LoggerAdapter // nil = watermill.NopLogger{}
}

// Broker is a Watermill Pub/Sub reached through a URL.
type Broker interface {
	// Publisher returns the broker's publisher. The Broker owns it: its Close
	// does nothing, Broker.Close closes it. It also has Ping (see Pinger).
	Publisher() message.Publisher
	// Subscriber returns a subscriber whose deliveries are shared by every subscriber of the same group
	// (a durable consumer / queue / consumer group, whatever the broker calls it) and acked per message.
	// Closing it releases its resources but keeps the group's position; Broker.Close closes those still open.
	Subscriber(group string) (message.Subscriber, error)
	// Scheme is the URL scheme in its canonical form ("nats", "amqp", "redis", "kafka", "postgres" or
	// "mem"): postgresql:// reports "postgres", inprocess:// "mem", amqps:// "amqp" and rediss:// "redis".
	Scheme() string
	// Close closes the subscribers still open, then the publisher and the connections.
	Close() error
}

// connectTimeout bounds each connection attempt and reachability check made by
// Open (within the caller's ctx), so a broker that does not answer is reported
// in seconds rather than after a library's default of 30 s or more.
const connectTimeout = 5 * time.Second

// opener connects to one kind of broker. raw is the URL as given (the client
// libraries parse it themselves); u is the same URL parsed.
type opener func(ctx context.Context, u *url.URL, raw string, logger watermill.LoggerAdapter) (*pubSub, error)

// urlCheck refuses, before any connection, a URL that lacks what the broker
// needs, rather than let a client library fall back to a default server.
type urlCheck func(u *url.URL, raw string) error

var openers = map[string]struct {
	scheme string
	check  urlCheck
	open   opener
	topic  topicCheck
}{
	"nats":       {"nats", checkNATSURL, openNATS, natsTopic},
	"amqp":       {"amqp", checkAMQPURL, openAMQP, amqpTopic},
	"amqps":      {"amqp", checkAMQPURL, openAMQP, amqpTopic},
	"redis":      {"redis", checkRedisURL, openRedis, redisTopic},
	"rediss":     {"redis", checkRedisURL, openRedis, redisTopic},
	"kafka":      {"kafka", checkKafkaURL, openKafka, kafkaTopic},
	"postgres":   {"postgres", checkPostgresURL, openPostgres, postgresTopic},
	"postgresql": {"postgres", checkPostgresURL, openPostgres, postgresTopic},
	"mem":        {"mem", checkNothing, openMem, anyTopic},
	"inprocess":  {"mem", checkNothing, openMem, anyTopic},
}

// Open connects to the broker named by rawURL and checks it is reachable; an unknown scheme, a URL missing its
// server or an unreachable broker is an error that names the URL (with any password redacted) and what failed.
func Open(ctx context.Context, rawURL string, opts Options) (Broker, error) {
	logger := opts.Logger
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	shown := Redacted(rawURL)
	u, err := url.Parse(rawURL)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // url.Error repeats the whole URL, password included
		}
		return nil, fmt.Errorf("broker: %q: parsing URL: %w", shown, scrubbed(err, rawURL))
	}
	kind, ok := openers[strings.ToLower(u.Scheme)]
	if !ok {
		return nil, fmt.Errorf("broker: %q: unknown scheme %q (want nats, amqp, redis, kafka, postgres or mem)", shown, u.Scheme)
	}
	if err := kind.check(u, rawURL); err != nil {
		return nil, fmt.Errorf("broker: %q: %w", shown, scrubbed(err, rawURL))
	}
	ps, err := kind.open(ctx, u, rawURL, logger)
	if err != nil {
		return nil, fmt.Errorf("broker: %q: %w", shown, scrubbed(err, rawURL))
	}
	ps.scheme = kind.scheme
	ps.pub = topicChecked{Publisher: ps.pub, scheme: kind.scheme}
	if async := ps.async; async != nil {
		scheme := kind.scheme
		ps.async = func(topic string, msg *message.Message, done func(error)) {
			if err := ValidateTopic(scheme, topic); err != nil {
				done(err)
				return
			}
			async(topic, msg, func(err error) {
				if err != nil {
					err = fmt.Errorf("broker: %s: %w", scheme, err)
				}
				done(err)
			})
		}
	}
	return ps, nil
}

// Pinger is what every Broker's Publisher also is: Ping asks the broker
// whether it takes publishes at all, with a round trip where the client
// allows one. The relay asks it after a failed publish, to tell an outage
// (every publish fails, nobody's fault) from a message the broker refuses.
type Pinger interface {
	Ping(ctx context.Context) error
}

// pubSub is the Broker of every scheme: one publisher made at Open, and
// subscribers made on demand and tracked so that Close can close them.
type pubSub struct {
	scheme string
	pub    message.Publisher
	// ping checks the broker answers; nil when there is nothing to ask.
	ping func(ctx context.Context) error
	// async publishes without waiting (see AsyncPublisher); nil when the
	// broker's client cannot.
	async func(topic string, msg *message.Message, done func(error))
	// newSub makes a subscriber of a non-empty group.
	newSub func(group string) (message.Subscriber, error)
	// closers release what pub and the subscribers share (connections,
	// pools); they run last, in order.
	closers []func() error

	mu     sync.Mutex
	subs   map[*ownedSubscriber]struct{}
	closed bool
}

func (p *pubSub) Scheme() string { return p.scheme }

func (p *pubSub) Publisher() message.Publisher {
	owned := ownedPublisher{p.pub, p.scheme, p.ping}
	if p.async != nil {
		return asyncPublisher{owned, p.async}
	}
	return owned
}

func (p *pubSub) Subscriber(group string) (message.Subscriber, error) {
	if strings.TrimSpace(group) == "" {
		return nil, fmt.Errorf("broker: %s: subscriber group is empty", p.scheme)
	}
	if p.isClosed() {
		return nil, fmt.Errorf("broker: %s: closed", p.scheme)
	}
	// Made outside the lock: it may dial the broker.
	sub, err := p.newSub(group)
	if err != nil {
		return nil, fmt.Errorf("broker: %s: subscriber for group %q: %w", p.scheme, group, err)
	}
	owned := &ownedSubscriber{Subscriber: sub, parent: p}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = sub.Close()
		return nil, fmt.Errorf("broker: %s: closed", p.scheme)
	}
	if p.subs == nil {
		p.subs = make(map[*ownedSubscriber]struct{})
	}
	p.subs[owned] = struct{}{}
	return wrapSubscriber(owned, sub), nil
}

// subscriberCloseGrace is how long Close waits for the subscribers before
// it closes the connections they share under them.
var subscriberCloseGrace = 15 * time.Second

// closeShared runs the closers, in order.
func (p *pubSub) closeShared() []error {
	var errs []error
	for _, c := range p.closers {
		if err := c(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func (p *pubSub) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

func (p *pubSub) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	subs := make([]*ownedSubscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()

	// The subscribers close first (each gives back what it holds, for the
	// group's other members), then what they share. A subscriber that does
	// not close within subscriberCloseGrace waits for a server that cannot
	// be reached (watermill-amqp's waits for its reconnection, which only
	// the connection's close or its context ends): the shared connections
	// are closed under it, and it ends.
	var errs []error // the goroutine's until closed
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		for _, s := range subs {
			if err := s.close(); err != nil {
				errs = append(errs, fmt.Errorf("closing subscriber: %w", err))
			}
		}
	}()
	var closers []error
	select {
	case <-closed:
	case <-time.After(subscriberCloseGrace):
		closers = p.closeShared()
		<-closed
		closers = append(closers, fmt.Errorf("subscribers not closed after %s (the server unreachable?): their connections were closed under them", subscriberCloseGrace))
	}
	if err := p.pub.Close(); err != nil {
		errs = append(errs, fmt.Errorf("closing publisher: %w", err))
	}
	if closers == nil {
		closers = p.closeShared()
	}
	errs = append(errs, closers...)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("broker: %s: %w", p.scheme, err)
	}
	return nil
}

// ownedPublisher hands out the Broker's publisher without letting a caller
// close it under the Broker's other users (on mem:// that would also close
// every subscriber).
type ownedPublisher struct {
	message.Publisher
	scheme string
	ping   func(ctx context.Context) error
}

func (ownedPublisher) Close() error { return nil }

// Ping implements Pinger.
func (o ownedPublisher) Ping(ctx context.Context) error {
	if o.ping == nil {
		return nil
	}
	if err := o.ping(ctx); err != nil {
		return fmt.Errorf("broker: %s: %w", o.scheme, err)
	}
	return nil
}

// AsyncPublisher is what the Publisher of a Broker also is when its client
// keeps many publishes in flight on one connection and confirms each on its
// own (NATS JetStream today). A relay uses it instead of a pool of
// goroutines each waiting for one confirmation: the messages go out
// together in a few writes, and their confirmations come back together.
type AsyncPublisher interface {
	message.Publisher
	// PublishAsync hands msg to the broker for topic and returns without
	// waiting. done is called exactly once, from another goroutine or
	// before PublishAsync returns: with nil once the broker confirmed msg,
	// else with the reason it did not. Messages in flight together may be
	// stored in any order: publish a message whose order matters after the
	// previous one is done. It neither acks nor keeps msg, which may be a
	// bare message.Message{UUID, Metadata, Payload}.
	PublishAsync(topic string, msg *message.Message, done func(error))
}

type asyncPublisher struct {
	ownedPublisher
	async func(topic string, msg *message.Message, done func(error))
}

func (a asyncPublisher) PublishAsync(topic string, msg *message.Message, done func(error)) {
	a.async(topic, msg, done)
}

// ConcurrentSubscriber is what a Broker's Subscriber also is when each of
// its subscriptions hands out many messages without waiting for the
// previous ones' acks (NATS JetStream today): up to MaxInFlight at once.
// A Watermill router runs its handler on each message as it comes, so one
// such subscriber is enough for that many at once. The other brokers'
// subscribers hand out a message once the one before is acked: several
// members of a group handle several at once.
//
// LimitInFlight lowers the bound of the subscriptions made after it (at
// least 1): a consumer that must handle one message at a time, in order,
// limits it to 1.
type ConcurrentSubscriber interface {
	message.Subscriber
	MaxInFlight() int
	LimitInFlight(n int)
}

type concurrentSubscriber struct {
	*ownedSubscriber
	c ConcurrentSubscriber
}

func (s concurrentSubscriber) MaxInFlight() int    { return s.c.MaxInFlight() }
func (s concurrentSubscriber) LimitInFlight(n int) { s.c.LimitInFlight(n) }

// ownedSubscriber makes Close idempotent (not every Watermill subscriber is)
// and forgets the subscriber in its Broker.
type ownedSubscriber struct {
	message.Subscriber
	parent *pubSub
	once   sync.Once
	err    error
}

// Subscribe checks the topic first: a subscriber, too, may create a stream,
// exchange or table for it.
func (s *ownedSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := ValidateTopic(s.parent.scheme, topic); err != nil {
		return nil, err
	}
	ch, err := s.Subscriber.Subscribe(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("broker: %s: subscribing to %q: %w", s.parent.scheme, topic, err)
	}
	return ch, nil
}

func (s *ownedSubscriber) Close() error {
	if err := s.close(); err != nil {
		return fmt.Errorf("broker: %s: closing subscriber: %w", s.parent.scheme, err)
	}
	return nil
}

// close is Close without the package prefix, for the Broker's Close.
func (s *ownedSubscriber) close() error {
	s.once.Do(func() {
		s.err = s.Subscriber.Close()
		s.parent.mu.Lock()
		delete(s.parent.subs, s)
		s.parent.mu.Unlock()
	})
	return s.err
}

// bounded runs open, which cannot be cancelled, and stops waiting for it when
// ctx ends; whatever open returns after that is discarded so nothing leaks.
func bounded[T any](ctx context.Context, open func() (T, error), discard func(T)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := open()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.err == nil {
				discard(r.v)
			}
		}()
		var zero T
		return zero, ctx.Err()
	}
}

// MessagingSystem is OpenTelemetry's messaging.system value for a broker of
// the given canonical scheme (see Broker.Scheme): "rabbitmq" for amqp, the
// scheme itself for the others, "watermill" for the in-process mem.
func MessagingSystem(scheme string) string {
	switch scheme {
	case "amqp":
		return "rabbitmq"
	case "postgres":
		return "postgresql"
	case "mem", "":
		return "watermill"
	}
	return scheme
}
