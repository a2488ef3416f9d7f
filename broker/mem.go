package broker

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
)

// In-process through Watermill's GoChannel, for tests and examples that run
// with no broker. It is Persistent: it keeps every message of the Broker's
// life, in memory, and a new group receives all of them, so a subscriber
// that attaches after a Publish still gets it.
//
// GoChannel gives every subscription every message, knows no groups, and
// sends each message from a goroutine of its own, so in no set order. Here a
// group is one GoChannel subscription per topic, opened by the group's first
// Subscribe and kept until the Broker closes. The publisher numbers each
// topic's messages, and the group hands them to its members in that order,
// one at a time: the next once the previous one is acked, as a Kafka
// partition or a RabbitMQ queue with a prefetch of one would. A message a
// member received but had not acked or nacked when it stopped is nacked, so
// another member gets it.

// memSeqKey carries a message's number within its topic from the publisher
// to the groups, which remove it.
const memSeqKey = "_entoutbox_mem_seq"

func openMem(_ context.Context, _ *url.URL, _ string, logger watermill.LoggerAdapter) (*pubSub, error) {
	// GoChannel logs at Info every message published with no subscriber,
	// the normal case here; the Broker's logger would be too chatty for it.
	gc := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	ctx, cancel := context.WithCancel(context.Background())
	groups := &memGroups{gc: gc, ctx: ctx, logger: logger, outs: map[memKey]<-chan *message.Message{}}
	return &pubSub{
		pub: &memPublisher{gc: gc, seq: map[string]uint64{}},
		newSub: func(group string) (message.Subscriber, error) {
			return &memSubscriber{groups: groups, group: group, closing: make(chan struct{})}, nil
		},
		closers: []func() error{func() error { cancel(); return nil }},
	}, nil
}

// memPublisher numbers each topic's messages from 1, with no gaps.
type memPublisher struct {
	gc *gochannel.GoChannel

	mu  sync.Mutex
	seq map[string]uint64 // topic → number of its last message
}

func (p *memPublisher) Publish(topic string, messages ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.seq[topic]
	numbered := make([]*message.Message, len(messages))
	for i, m := range messages {
		n++
		c := m.Copy() // the caller's message stays as it was
		c.Metadata.Set(memSeqKey, strconv.FormatUint(n, 10))
		numbered[i] = c
	}
	if err := p.gc.Publish(topic, numbered...); err != nil {
		return err
	}
	p.seq[topic] = n
	return nil
}

func (p *memPublisher) Close() error { return p.gc.Close() }

type memKey struct{ topic, group string }

// memGroups holds, for each (topic, group), the channel its members take
// messages from.
type memGroups struct {
	gc     *gochannel.GoChannel
	ctx    context.Context // the Broker's life
	logger watermill.LoggerAdapter

	mu   sync.Mutex
	outs map[memKey]<-chan *message.Message
}

func (g *memGroups) channel(topic, group string) (<-chan *message.Message, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	key := memKey{topic, group}
	if out, ok := g.outs[key]; ok {
		return out, nil
	}
	in, err := g.gc.Subscribe(g.ctx, topic)
	if err != nil {
		return nil, err // the Broker's subscriber names the topic
	}
	out := make(chan *message.Message)
	go g.sequence(topic, in, out)
	g.outs[key] = out
	return out, nil
}

// sequence passes the messages of in to out in their publisher's order, the
// next one once the previous one is acked. GoChannel sends a nacked message
// again, to in. It returns, closing out, when the GoChannel or the Broker
// closes.
func (g *memGroups) sequence(topic string, in <-chan *message.Message, out chan<- *message.Message) {
	defer close(out)
	pending := map[uint64]*message.Message{}
	next := uint64(1)
	var inFlight *message.Message
	for {
		var (
			send          chan<- *message.Message
			head          *message.Message
			acked, nacked <-chan struct{}
		)
		if inFlight != nil {
			acked, nacked = inFlight.Acked(), inFlight.Nacked()
		} else if m, ok := pending[next]; ok {
			send, head = out, m
		}
		select {
		case m, ok := <-in:
			if !ok {
				return
			}
			seq, err := strconv.ParseUint(m.Metadata.Get(memSeqKey), 10, 64)
			if err != nil || seq < next {
				// Cannot happen: every message comes through memPublisher,
				// and an acked one is not sent again.
				g.logger.Error("Dropping unnumbered or stale in-process message", err,
					watermill.LogFields{"topic": topic, "message_uuid": m.UUID, "seq": m.Metadata.Get(memSeqKey)})
				m.Ack()
				continue
			}
			delete(m.Metadata, memSeqKey)
			pending[seq] = m
		case send <- head:
			inFlight = head
			delete(pending, next)
		case <-acked:
			inFlight = nil
			next++
		case <-nacked:
			inFlight = nil
		case <-g.ctx.Done():
			return
		}
	}
}

// memSubscriber is one member of a group.
type memSubscriber struct {
	groups *memGroups
	group  string

	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	running sync.WaitGroup
}

func (s *memSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errors.New("subscriber closed")
	}
	s.running.Add(1)
	s.mu.Unlock()

	in, err := s.groups.channel(topic, s.group)
	if err != nil {
		s.running.Done()
		return nil, err
	}
	out := make(chan *message.Message)
	go s.forward(ctx, in, out)
	return out, nil
}

// forward hands the group's messages to this member until ctx ends, the
// member closes or the Broker does.
func (s *memSubscriber) forward(ctx context.Context, in <-chan *message.Message, out chan<- *message.Message) {
	stopped := make(chan struct{})
	defer s.running.Done()
	defer close(out)
	defer close(stopped)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.closing:
			return
		case msg, ok := <-in:
			if !ok {
				return
			}
			select {
			case out <- msg:
				go nackIfAbandoned(msg, stopped)
			case <-ctx.Done():
				msg.Nack()
				return
			case <-s.closing:
				msg.Nack()
				return
			}
		}
	}
}

// nackIfAbandoned gives msg back to the group if the member that received it
// stops before acking or nacking it.
func nackIfAbandoned(msg *message.Message, stopped <-chan struct{}) {
	select {
	case <-msg.Acked():
	case <-msg.Nacked():
	case <-stopped:
		msg.Nack()
	}
}

func (s *memSubscriber) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.closing)
	}
	s.mu.Unlock()
	s.running.Wait()
	return nil
}
