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
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/entoutbox/entoutbox/events"
)

// RabbitMQ: topic T is a durable fanout exchange named T, and group G is the
// durable queue "T_G" bound to it (watermill-amqp/v3's durable Pub/Sub), so
// each group gets every message and its members share them. A group that
// reads by partition has a queue per partition instead (amqppartition.go).
//
// Publish counts a message as delivered only when RabbitMQ routed it to a
// queue. Messages are persistent and published with the mandatory flag on a
// channel in confirm mode: a message no queue takes (no group has subscribed
// to the topic yet) comes back as basic.return before its basic.ack, and
// Publish returns an error for it instead of nil. So start the consumers, or
// declare their queues, before the relay: until then the relay retries, then
// dead-letters with that reason. A group receives what was published after
// its queue was first declared (by Subscribe), not what came before.
//
// The publisher is our own on amqp091 (watermill-amqp's does not report
// returns), with the module's wire format: its headers, MessageId = the
// message UUID, persistent. It has a connection of its own, apart from the
// one the subscribers share and the module re-dials, so that RabbitMQ's flow
// control on publishers does not stall consumers. Each Publish takes a
// channel of its own from a pool; a broken connection fails the publishes in
// flight, and the next Publish dials again.

// amqpConfirmTimeout bounds the wait for RabbitMQ's confirms of a Publish.
const amqpConfirmTimeout = 30 * time.Second

// amqpMaxChannels bounds the channels (so the concurrent publishes) on the
// publisher's connection, under RabbitMQ's default limit of 2047.
const amqpMaxChannels = 1024

func openAMQP(ctx context.Context, u *url.URL, raw string, logger watermill.LoggerAdapter) (*pubSub, error) {
	split, raw, err := amqpPartitionsOf(u, raw)
	if err != nil {
		return nil, err
	}
	connCfg := wmamqp.ConnectionConfig{
		AmqpURI: raw,
		// Bounds the TCP dial and the AMQP handshake, at Open and on every
		// reconnection (amqp091's default is 30 s).
		AmqpConfig: &amqp.Config{Dial: amqp.DefaultDial(connectTimeout)},
	}
	pub := &amqpPublisher{
		uri: raw,
		config: amqp.Config{
			Dial:       amqp.DefaultDial(connectTimeout),
			Properties: amqp.Table{"connection_name": "entoutbox publisher"},
		},
		slots: make(chan struct{}, amqpMaxChannels),
		split: split,
	}
	if _, err := bounded(ctx, func() (*amqp.Connection, error) { return pub.connect() },
		func(*amqp.Connection) { _ = pub.Close() }); err != nil {
		if errors.Is(err, ctx.Err()) { // given up on, not failed: connect did not say
			err = fmt.Errorf("connecting: %w", err)
		}
		return nil, err
	}
	conn, err := bounded(ctx, func() (*wmamqp.ConnectionWrapper, error) {
		return wmamqp.NewConnection(connCfg, logger)
	}, func(c *wmamqp.ConnectionWrapper) { _ = c.Close() })
	if err != nil {
		_ = pub.Close()
		return nil, fmt.Errorf("connecting: %w", err)
	}
	return &pubSub{
		pub:  pub,
		ping: pub.ping,
		newSub: func(group string) (message.Subscriber, error) {
			queues := wmamqp.GenerateQueueNameTopicNameWithSuffix(group)
			sub, err := wmamqp.NewSubscriberWithConnection(amqpConfig(connCfg, queues), logger, conn)
			if err != nil {
				return nil, err
			}
			s := &amqpSubscriber{Subscriber: sub, pub: pub, group: group, logger: logger}
			if split { // a second subscriber for the partitions' queues (T.~k_G)
				cfg := amqpConfig(connCfg, queues)
				cfg.TopologyBuilder = amqpPartitionTopology{}
				if s.parts, err = wmamqp.NewSubscriberWithConnection(cfg, logger, conn); err != nil {
					_ = sub.Close()
					return nil, err
				}
			}
			return s, nil
		},
		closers: []func() error{conn.Close},
	}, nil
}

// amqpConfig is the module's durable Pub/Sub configuration with the message
// UUID as AMQP message-id; the subscribers use it.
func amqpConfig(conn wmamqp.ConnectionConfig, queueName wmamqp.QueueNameGenerator) wmamqp.Config {
	cfg := wmamqp.NewDurablePubSubConfig(conn.AmqpURI, queueName)
	cfg.Connection = conn
	cfg.Marshaler = amqpMarshaler{}
	cfg.Publish.ConfirmDelivery = true
	return cfg
}

// amqpMarshaler is the module's DefaultMarshaler (UUID and metadata as
// headers) that also sets the standard message-id property to the UUID, for
// consumers and tools that do not know Watermill's header, and sends the
// metadata key content-type as the content-type property: where the
// CloudEvents AMQP binding puts datacontenttype in binary mode (section
// 3.1.1; the relay's CloudEvents attributes set the key).
type amqpMarshaler struct{ wmamqp.DefaultMarshaler }

// amqpContentType is the metadata key sent as the content-type property.
const amqpContentType = "content-type"

func (m amqpMarshaler) Marshal(msg *message.Message) (amqp.Publishing, error) {
	p, err := m.DefaultMarshaler.Marshal(msg)
	if err != nil {
		return p, err
	}
	p.MessageId = msg.UUID
	if ct, ok := p.Headers[amqpContentType].(string); ok {
		p.ContentType = ct
		delete(p.Headers, amqpContentType)
	}
	return p, nil
}

// Unmarshal is the module's, plus the content-type property as the
// metadata key content-type, and events.MetaDeliveryCount: RabbitMQ says
// only whether the message was delivered before, so "2" stands for two or
// more.
func (m amqpMarshaler) Unmarshal(d amqp.Delivery) (*message.Message, error) {
	msg, err := m.DefaultMarshaler.Unmarshal(d)
	if err != nil {
		return nil, err
	}
	if d.ContentType != "" && msg.Metadata.Get(amqpContentType) == "" {
		msg.Metadata.Set(amqpContentType, d.ContentType)
	}
	count := "1"
	if d.Redelivered {
		count = "2"
	}
	msg.Metadata.Set(events.MetaDeliveryCount, count)
	return msg, nil
}

// amqpPublisher publishes with mandatory and confirms, one channel per
// Publish at a time, so that every return and confirm on a channel belongs
// to the Publish holding it.
type amqpPublisher struct {
	uri    string
	config amqp.Config
	slots  chan struct{} // a slot per channel in use
	split  bool          // routing keys carry the partition (amqppartition.go)

	mu       sync.Mutex
	conn     *amqp.Connection
	blocked  *atomic.Pointer[string] // conn's flow-control reason while RabbitMQ blocks it
	idle     []*pubChannel           // channels of conn free for a Publish
	declared map[string]bool         // exchanges declared on conn
	dialing  chan struct{}           // closed when the dial in progress ends
	dialErr  error                   // how the last dial ended
	closed   bool
}

// pubChannel is a channel in confirm mode and its notifications.
type pubChannel struct {
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
	// closeErr is what closes delivered, kept for later errors.
	closeErr *amqp.Error
}

// connect dials a new connection, or waits for the dial in progress, and
// returns the connection. A dial that fails is an error for every Publish
// waiting on it, so an outage costs each of them one dial at most.
func (p *amqpPublisher) connect() (*amqp.Connection, error) {
	for {
		p.mu.Lock()
		switch {
		case p.closed:
			p.mu.Unlock()
			return nil, errors.New("publisher closed")
		case p.conn != nil && !p.conn.IsClosed():
			conn := p.conn
			p.mu.Unlock()
			return conn, nil
		case p.dialing != nil:
			wait := p.dialing
			p.mu.Unlock()
			<-wait
			p.mu.Lock()
			err := p.dialErr
			p.mu.Unlock()
			if err != nil {
				return nil, err
			}
			continue
		}
		p.dialing = make(chan struct{})
		p.mu.Unlock()

		conn, err := amqp.DialConfig(p.uri, p.config)
		if err != nil {
			err = fmt.Errorf("connecting: %w", err)
		}
		blocked := &atomic.Pointer[string]{}
		if err == nil {
			go watchBlocked(conn.NotifyBlocked(make(chan amqp.Blocking, 1)), blocked)
		}
		p.mu.Lock()
		p.dialErr = err
		if err == nil {
			if p.closed {
				_ = conn.Close()
			} else {
				p.conn, p.blocked, p.idle, p.declared = conn, blocked, nil, map[string]bool{}
			}
		}
		close(p.dialing)
		p.dialing = nil
		p.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
}

// watchBlocked keeps the reason RabbitMQ gave for blocking the connection
// (it does when short of memory or disk) until it unblocks it.
func watchBlocked(notes <-chan amqp.Blocking, blocked *atomic.Pointer[string]) {
	for b := range notes {
		if b.Active {
			reason := b.Reason
			blocked.Store(&reason)
		} else {
			blocked.Store(nil)
		}
	}
}

// ping opens and closes a channel on the publisher's connection (dialling
// it if need be): a round trip that RabbitMQ answers while it takes
// publishes, and refuses while it blocks the connection.
func (p *amqpPublisher) ping(ctx context.Context) error {
	_, err := bounded(ctx, func() (struct{}, error) {
		conn, err := p.connect()
		if err != nil {
			return struct{}{}, err
		}
		p.mu.Lock()
		reason := p.blocked.Load()
		p.mu.Unlock()
		if reason != nil {
			return struct{}{}, fmt.Errorf("RabbitMQ blocks publishing: %s", *reason)
		}
		ch, err := conn.Channel()
		if err != nil {
			return struct{}{}, fmt.Errorf("opening a channel: %w", err)
		}
		return struct{}{}, ch.Close()
	}, func(struct{}) {})
	return err
}

// channel returns an idle channel of the current connection, or a new one.
func (p *amqpPublisher) channel() (*pubChannel, error) {
	conn, err := p.connect()
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if reason := p.blocked.Load(); reason != nil && p.conn == conn {
		p.mu.Unlock()
		return nil, fmt.Errorf("RabbitMQ is blocking publishes (%s); it is short of memory or disk", *reason)
	}
	for len(p.idle) > 0 {
		c := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if c.conn == conn && !c.ch.IsClosed() {
			p.mu.Unlock()
			return c, nil
		}
	}
	p.mu.Unlock()
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("opening a channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("putting the channel in confirm mode: %w", err)
	}
	return &pubChannel{
		conn: conn,
		ch:   ch,
		// Returns are read while confirms are awaited; the buffer only
		// keeps amqp091's reader from waiting on a burst of them.
		returns: ch.NotifyReturn(make(chan amqp.Return, 64)),
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
	}, nil
}

// release gives c back for the next Publish, unless it may still receive
// confirms or returns of this one (not clean) or is closed.
func (p *amqpPublisher) release(c *pubChannel, clean bool) {
	p.mu.Lock()
	keep := clean && !p.closed && c.conn == p.conn && !c.ch.IsClosed()
	if keep {
		p.idle = append(p.idle, c)
	}
	p.mu.Unlock()
	if !keep {
		// In the background: closing waits for RabbitMQ's reply.
		go func() { _ = c.ch.Close() }()
	}
}

func (p *amqpPublisher) declare(c *pubChannel, exchange string) error {
	p.mu.Lock()
	done := c.conn == p.conn && p.declared[exchange]
	p.mu.Unlock()
	if done {
		return nil
	}
	// As the module's subscribers declare it, or the two would conflict.
	if err := c.ch.ExchangeDeclare(exchange, "fanout", true, false, false, false, nil); err != nil {
		return fmt.Errorf("declaring exchange %q: %w", exchange, err)
	}
	p.mu.Lock()
	if c.conn == p.conn {
		p.declared[exchange] = true
	}
	p.mu.Unlock()
	return nil
}

// forget makes the next Publish to exchange declare it again: it may have
// been deleted.
func (p *amqpPublisher) forget(exchange string) {
	p.mu.Lock()
	delete(p.declared, exchange)
	p.mu.Unlock()
}

// Publish sends messages to the exchange named topic and returns nil only
// when RabbitMQ confirmed every one of them and returned none as
// unroutable.
func (p *amqpPublisher) Publish(topic string, messages ...*message.Message) error {
	if len(messages) == 0 {
		return nil
	}
	p.slots <- struct{}{}
	defer func() { <-p.slots }()
	c, err := p.channel()
	if err != nil {
		return err
	}
	clean := false
	defer func() { p.release(c, clean) }()
	if err := p.declare(c, topic); err != nil {
		return err
	}
	clean, err = p.publish(c, topic, messages)
	if err != nil {
		p.forget(topic)
	}
	return err
}

// publish sends messages on c and waits for their confirms; clean says
// whether c holds nothing more of them.
func (p *amqpPublisher) publish(c *pubChannel, exchange string, messages []*message.Message) (clean bool, err error) {
	confirms := make([]*amqp.DeferredConfirmation, 0, len(messages))
	for _, m := range messages {
		if err := m.Context().Err(); err != nil {
			return len(confirms) == 0, fmt.Errorf("message %s: %w", m.UUID, err)
		}
		pub, err := (amqpMarshaler{}).Marshal(m)
		if err != nil {
			return len(confirms) == 0, fmt.Errorf("message %s: %w", m.UUID, err)
		}
		dc, err := c.ch.PublishWithDeferredConfirm(exchange, amqpRoutingKey(p.split, m), true, false, pub)
		if err != nil {
			return false, fmt.Errorf("publishing message %s to exchange %q: %w", m.UUID, exchange, c.closeReason(err))
		}
		confirms = append(confirms, dc)
	}

	var returned []amqp.Return
	returns := c.returns
	timeout := time.NewTimer(amqpConfirmTimeout)
	defer timeout.Stop()
	var failed error
	for i, dc := range confirms {
	wait:
		for {
			select {
			case r, ok := <-returns:
				if !ok {
					returns = nil // the channel closed
					continue
				}
				returned = append(returned, r)
			case <-dc.Done():
				break wait
			case <-timeout.C:
				return false, fmt.Errorf("message %s to exchange %q: no confirm from RabbitMQ within %s",
					messages[i].UUID, exchange, amqpConfirmTimeout)
			}
		}
		if !dc.Acked() && failed == nil {
			if c.ch.IsClosed() {
				failed = fmt.Errorf("message %s to exchange %q: not confirmed: %w", messages[i].UUID, exchange, c.closeReason(amqp.ErrClosed))
			} else {
				failed = fmt.Errorf("message %s to exchange %q: RabbitMQ refused it (nack)", messages[i].UUID, exchange)
			}
		}
	}
	// RabbitMQ sends a message's basic.return before its basic.ack, and
	// amqp091 hands them over in that order: every return is in by now.
	for drained := false; !drained && returns != nil; {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			returned = append(returned, r)
		default:
			drained = true
		}
	}
	if failed != nil {
		return !c.ch.IsClosed(), failed
	}
	if len(returned) > 0 {
		return true, returnedError(exchange, returned)
	}
	return true, nil
}

// closeReason is the error the channel was closed with, if it was, else
// err. Only the Publish holding c calls it.
func (c *pubChannel) closeReason(err error) error {
	if c.closeErr == nil {
		select {
		case e, ok := <-c.closes:
			if ok && e != nil {
				c.closeErr = e
			}
		default:
		}
	}
	if c.closeErr != nil {
		return fmt.Errorf("channel closed: %w", c.closeErr)
	}
	return err
}

func returnedError(exchange string, returned []amqp.Return) error {
	r := returned[0]
	var err error
	if r.ReplyCode == amqp.NoRoute {
		err = fmt.Errorf("message %s to exchange %q was returned unroutable (%s): no queue is bound; start the consumers (or declare their queues) before the relay",
			r.MessageId, exchange, r.ReplyText)
	} else {
		err = fmt.Errorf("message %s to exchange %q was returned by RabbitMQ (%d %s)", r.MessageId, exchange, r.ReplyCode, r.ReplyText)
	}
	if len(returned) > 1 {
		err = fmt.Errorf("%w (and %d more of this publish)", err, len(returned)-1)
	}
	return err
}

func (p *amqpPublisher) Close() error {
	p.mu.Lock()
	p.closed = true
	conn := p.conn
	p.conn, p.idle = nil, nil
	p.mu.Unlock()
	if conn == nil {
		return nil
	}
	if err := conn.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
		return err
	}
	return nil
}

// amqpSubscriber says, once per topic, when a group subscribes to a topic
// whose exchange does not exist yet: no producer has published on it, which
// for a consumer usually means its topic prefix differs from the relay's.
// (The subscription declares the exchange, so it is said only the first
// time.)
type amqpSubscriber struct {
	*wmamqp.Subscriber
	parts  *wmamqp.Subscriber // the partitions' queues; nil with ?partitions=0
	pub    *amqpPublisher
	group  string
	logger watermill.LoggerAdapter
}

func (s *amqpSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if exists, err := s.pub.exchangeExists(ctx, topic); err == nil && !exists {
		s.logger.Info("No producer has published on this topic yet: its RabbitMQ exchange is declared by this subscriber. "+
			"If a relay is running, check that its --topic-prefix matches the consumers' consumer.WithTopicPrefix",
			watermill.LogFields{"topic": topic, "group": s.group})
	}
	return s.Subscriber.Subscribe(ctx, topic)
}

// exchangeExists asks RabbitMQ with a passive declare, on a channel of its
// own: a missing exchange closes the channel it was asked on.
func (p *amqpPublisher) exchangeExists(ctx context.Context, name string) (bool, error) {
	return bounded(ctx, func() (bool, error) {
		conn, err := p.connect()
		if err != nil {
			return false, err
		}
		ch, err := conn.Channel()
		if err != nil {
			return false, err
		}
		err = ch.ExchangeDeclarePassive(name, "fanout", true, false, false, false, nil)
		var aerr *amqp.Error
		if errors.As(err, &aerr) && aerr.Code == amqp.NotFound {
			return false, nil // the channel is closed by the broker
		}
		_ = ch.Close()
		return err == nil, err
	}, func(bool) {})
}
