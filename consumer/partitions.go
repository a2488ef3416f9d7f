package consumer

// Reading by partition. Where the broker splits a topic into partitions
// by aggregate (broker.PartitionSubscriber: NATS, Redis, RabbitMQ), each instance
// of a consumer name reads only its share of them (internal/sharing), so
// that while the instances stay the same one aggregate's events reach one
// instance: it applies them as runs, and a second or third instance adds
// speed instead of handing each aggregate back and forth. When an instance
// joins, leaves or dies, the shares move at the next beat (or when the
// dead one's lease ends); meanwhile a partition may be read by two
// instances or by none for a moment, which the number check makes a
// matter of speed, not of order.

import (
	"context"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/consumer/internal/sharing"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

const (
	// shareBeat is how often a member renews its membership and looks
	// at the others: a joining instance gets its share within it.
	shareBeat = time.Second
	// shareLease is how long a member that stopped beating (a killed
	// instance) keeps its share unread.
	shareLease = 6 * time.Second
	// shareSettle is how long a joining member waits after joining before
	// it reads its share.
	shareSettle = 300 * time.Millisecond
)

// partitionSubscriber is broker.PartitionSubscriber, without importing
// the broker package.
type partitionSubscriber interface {
	message.Subscriber
	Partitions(ctx context.Context, topic string) (int, error)
	SubscribePartition(ctx context.Context, topic string, partition int) (<-chan *message.Message, error)
}

// sharedSubscriber reads each topic by partition, this member's share of
// them, when its broker splits the topic; else whole.
type sharedSubscriber struct {
	partitionSubscriber
	set      *Set
	consumer string
}

// partitioned returns sub reading by partition, when it can and the set
// has a database to keep the members in; else sub.
func (s *Set) partitioned(consumer string, sub message.Subscriber) message.Subscriber {
	ps, ok := sub.(partitionSubscriber)
	if !ok || s.db == nil || s.tables.Positions == "" || s.tables.Dialect != outboxdb.Postgres {
		// SQLite is one process's; on MySQL every instance reads every
		// partition, the positions' locks keeping each aggregate's order.
		return sub
	}
	shared := &sharedSubscriber{partitionSubscriber: ps, set: s, consumer: consumer}
	if c, ok := sub.(concurrentSubscriber); ok {
		return concurrentShared{shared, c}
	}
	return shared
}

// concurrentShared is a sharedSubscriber whose subscriptions hand out many
// messages at once.
type concurrentShared struct {
	*sharedSubscriber
	c concurrentSubscriber
}

func (s concurrentShared) MaxInFlight() int    { return s.c.MaxInFlight() }
func (s concurrentShared) LimitInFlight(n int) { s.c.LimitInFlight(n) }

// Subscribe reads topic's share of partitions into one channel, until ctx
// ends; a topic the broker keeps whole is read whole.
func (s *sharedSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	n, err := s.Partitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return s.partitionSubscriber.Subscribe(ctx, topic)
	}
	r := &shareReader{sub: s, topic: topic, n: n, out: make(chan *message.Message),
		member:  sharing.NewMember(s.set.db, s.set.tables.DB(), s.consumer, topic, uuid.NewString(), shareLease),
		reading: map[int]*partitionRead{}, log: watermill.LogFields{"consumer": s.consumer, "topic": topic}}
	go r.run(ctx)
	return r.out, nil
}

// shareReader is one Subscribe by partition.
type shareReader struct {
	sub     *sharedSubscriber
	topic   string
	n       int // partitions
	member  *sharing.Member
	out     chan *message.Message
	reading map[int]*partitionRead
	wg      sync.WaitGroup // forwards
	failing bool           // the last beat failed (said once)
	log     watermill.LogFields
}

// partitionRead is a partition being read.
type partitionRead struct {
	stop  context.CancelFunc
	slots *subscriberSlots
}

func (r *shareReader) run(ctx context.Context) {
	// Join, then look again a moment later before reading: instances
	// started together (a deployment) each see the others then, instead
	// of all reading every partition until the next beat. In the
	// background: a router subscribes its handlers one after another.
	if _, err := r.member.Beat(ctx); err == nil {
		select {
		case <-time.After(shareSettle):
		case <-ctx.Done():
		}
	}
	r.rebalance(ctx)
	t := time.NewTicker(shareBeat)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			r.rebalance(ctx)
		case <-ctx.Done():
			for _, p := range r.reading {
				p.stop()
			}
			r.wg.Wait()
			close(r.out)
			leave, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = r.member.Leave(leave) // else the others wait for its lease
			cancel()
			return
		}
	}
}

// rebalance renews the membership and reads this member's share: every
// partition while the members cannot be read.
func (r *shareReader) rebalance(ctx context.Context) {
	logger := r.sub.set.cfg.Logger
	members, err := r.member.Beat(ctx)
	own := sharing.Share(members, r.member.Name(), r.n)
	switch {
	case err != nil && ctx.Err() != nil:
		return
	case err != nil:
		if !r.failing {
			logger.Error("Cannot renew this instance's membership of the consumer group: reading every partition "+
				"until it can (in order still, but with the other instances)", err, r.log)
		}
		r.failing = true
		if len(r.reading) > 0 {
			return // keep what it reads
		}
		own = sharing.All(r.n)
	case r.failing:
		logger.Info("Consumer group membership renewed again", r.log)
		r.failing = false
	}
	r.apply(ctx, own, len(members))
}

// apply stops reading the partitions not in own and starts the others.
func (r *shareReader) apply(ctx context.Context, own []int, members int) {
	keep := map[int]bool{}
	for _, k := range own {
		keep[k] = true
	}
	changed := false
	for k, p := range r.reading {
		if !keep[k] {
			p.stop()
			delete(r.reading, k)
			changed = true
		}
	}
	for _, k := range own {
		if _, ok := r.reading[k]; ok {
			continue
		}
		pctx, stop := context.WithCancel(ctx)
		ch, err := r.sub.SubscribePartition(pctx, r.topic, k)
		if err != nil {
			stop()
			r.sub.set.cfg.Logger.Error("Cannot read a partition; trying again at the next beat", err,
				watermill.LogFields{"consumer": r.sub.consumer, "topic": r.topic, "partition": k})
			continue
		}
		p := &partitionRead{stop: stop, slots: slotsOf(r.sub.partitionSubscriber)}
		r.reading[k] = p
		r.wg.Add(1)
		go r.forward(ctx, ch, p)
		changed = true
	}
	if changed {
		r.sub.set.cfg.Logger.Info("Reading this instance's share of the topic's partitions", watermill.LogFields{
			"consumer": r.sub.consumer, "topic": r.topic, "partitions": len(r.reading), "of": r.n, "members": members})
	}
}

// forward hands a partition's messages on, each carrying the slots of its
// partition: a window full of one hot aggregate's events is that
// partition's, not the instance's.
func (r *shareReader) forward(ctx context.Context, ch <-chan *message.Message, p *partitionRead) {
	defer r.wg.Done()
	for msg := range ch {
		detach(ctx, msg)
		if p.slots != nil {
			msg.SetContext(context.WithValue(msg.Context(), partitionSlotsKey{}, p.slots))
		}
		select {
		case r.out <- msg:
		case <-ctx.Done():
			msg.Nack() // for the group's other members, at once
		}
	}
}

// detach gives msg a context that keeps its values but ends with ctx (the
// member's subscription: the router stopping), not with the partition's
// read, which ends when the partition moves to another member: what this
// member is applying then is applied, not abandoned half-way and left
// for the broker to deliver again after its ack wait while the new owner
// waits for it.
func detach(ctx context.Context, msg *message.Message) {
	mctx, cancel := context.WithCancel(context.WithoutCancel(msg.Context()))
	stop := context.AfterFunc(ctx, cancel)
	msg.SetContext(mctx)
	go func() {
		select {
		case <-msg.Acked():
		case <-msg.Nacked():
		case <-mctx.Done():
		}
		stop()
		cancel()
	}()
}

type partitionSlotsKey struct{}

// slotsFor returns the slots of the partition msg came from, or def.
func slotsFor(msg *message.Message, def *subscriberSlots) *subscriberSlots {
	if s, ok := msg.Context().Value(partitionSlotsKey{}).(*subscriberSlots); ok {
		return s
	}
	return def
}
