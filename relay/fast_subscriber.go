package relay

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/relay/internal/engine"
	"github.com/entoutbox/entoutbox/relay/internal/fastpath"
)

// Subscriber is the fast read path as a Watermill Subscriber over the
// outbox table. It claims rows in batches, hands out many messages at once
// but at most one per aggregate at a time (the next one after the previous
// is acked), wakes up on LISTEN/NOTIFY with polling as the fallback, and
// records acks in batches. Several subscribers, in one process or many,
// share a table: each owns a fair share of its partitions.
//
// Subscribe to AllTopics to read every row, or to one destination topic.
// An Ack records the row delivered; a Nack is a failed attempt: the row is
// tried again after a backoff, and goes to the dead letters after
// MaxAttempts. A message's context ends once it is acked or nacked.
//
// It also moves the scheduled events into the outbox when they are due
// (SubscriberConfig.ScheduledTable), from its first Subscribe until Close,
// as the relay does: a program that relays through a Subscriber of its own
// would otherwise never send them, and nothing would say so. The
// Subscribers and relays of a process on the same tables share that work.
//
// It is a thin adapter: the fast source (which the relay's fast path runs
// too) does the work, and the Subscriber hands its rows to the consumer
// and their acks and nacks back.
type Subscriber struct {
	src *fastpath.Source
	// promote starts the promoter once; stopPromoting stops it at Close.
	promote       sync.Once
	startPromoter func()
	stopPromoting func()

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup // the hand-out loops
}

var _ message.Subscriber = (*Subscriber)(nil)

// NewSubscriber returns a Subscriber on db (the pgx database/sql driver).
func NewSubscriber(db *sql.DB, cfg SubscriberConfig) (*Subscriber, error) {
	src, err := newFastSource(db, cfg, nil)
	if err != nil {
		return nil, err
	}
	cfg.setDefaults()
	tables := outboxdb.New(cfg.Table, cfg.DeadLetterTable)
	tables.Scheduled, tables.Sequences = cfg.ScheduledTable, cfg.SequenceTable
	s := &Subscriber{src: src, stopPromoting: func() {}}
	s.startPromoter = func() { s.stopPromoting = sharePromoter(db, cfg.listenDB(db), tables, cfg.Logger, nil, 0) }
	return s, nil
}

// Subscribe starts reading the rows of topic (AllTopics for every topic).
// The channel closes when ctx ends or the Subscriber is closed.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errors.New("relay: subscriber is closed")
	}
	s.wg.Add(1)
	s.promote.Do(s.startPromoter)
	s.mu.Unlock()
	if topic == AllTopics {
		topic = ""
	}
	sub, err := s.src.Subscribe(ctx, topic, 0)
	if err != nil {
		s.wg.Done()
		return nil, err
	}
	out := make(chan *message.Message)
	go func() {
		defer s.wg.Done()
		s.handOut(ctx, sub, out)
	}()
	return out, nil
}

// Close stops every subscription: acks received so far are recorded, and
// every row still held is released for the next reader.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	s.closed = true
	stopPromoting := s.stopPromoting
	s.mu.Unlock()
	stopPromoting()
	err := s.src.Close()
	s.wg.Wait()
	return err
}

// Status tells how many partitions the Subscriber's subscriptions own and
// whether they may send or wait for partitions. Safe to call at any time
// from any goroutine.
func (s *Subscriber) Status() SubscriberStatus { return SubscriberStatus(s.src.Status()) }

// handOut hands the rows sub hands out to the consumer on out, one at a
// time, as messages with ack channels, and takes each one's outcome back.
func (s *Subscriber) handOut(ctx context.Context, sub *fastpath.Subscription, out chan<- *message.Message) {
	defer close(out)
	for {
		// Until the subscription ends: it ends when ctx does.
		d, ok := sub.Next(context.Background())
		if !ok {
			return
		}
		row := d.Message()
		msg := message.NewMessage(row.UUID, row.Payload)
		msg.Metadata = row.Metadata
		msg.Metadata.Set(MetaTopic, d.Row().Topic)
		// The message's context ends once it is acked or nacked, as
		// Watermill subscribers do.
		mctx, cancel := context.WithCancel(ctx)
		msg.SetContext(mctx)
		if !s.offer(ctx, d, out, msg) {
			cancel()
			d.Unsent()
			continue
		}
		go s.await(sub, d, msg, cancel)
	}
}

// offerRecheck is how often a row offered to a busy consumer is checked
// to be still the subscription's to hand out.
const offerRecheck = 100 * time.Millisecond

// offer waits for the consumer to take msg, the message of d, and reports
// whether it took it while d could still be handed out: the subscription
// may lose the row's partition, or stop, while the consumer is busy.
func (s *Subscriber) offer(ctx context.Context, d engine.Delivery, out chan<- *message.Message, msg *message.Message) bool {
	select {
	case out <- msg:
		return true
	default:
	}
	t := time.NewTicker(offerRecheck)
	defer t.Stop()
	for d.MayPublish() {
		select {
		case out <- msg:
			return true
		case <-t.C:
		case <-ctx.Done():
			return false
		case <-s.src.Closing():
			return false
		}
	}
	return false
}

// await takes the consumer's ack or nack of msg back to the subscription:
// an ack delivers the row; a nack is a failed attempt the failure policy
// decides on.
func (s *Subscriber) await(sub *fastpath.Subscription, d engine.Delivery, msg *message.Message,
	cancel context.CancelFunc) {
	defer cancel()
	select {
	case <-msg.Acked():
		d.Delivered()
	case <-msg.Nacked():
		d.Failed(s.src.Policy().Decide(engine.Tries{Attempts: d.Row().Attempts}, nacked))
	case <-sub.Done(): // the partition is given up and the row will come again
	}
}

// nacked is the failure of a nacked message: a failed attempt of the
// consumer's.
var nacked = engine.Failure{Reason: "nacked by the subscriber's consumer", Counts: true}

// SubscriberStatus is what the subscriptions of a fast Subscriber (or of
// the relay's fast path) do, as their run loops last published it.
type SubscriberStatus struct {
	// Partitions is how many partitions its subscriptions own.
	Partitions int
	// Live tells that every subscription may send: it holds its liveness
	// lock (unless PollOnly) and renewed its leases within two thirds of
	// Lease. False while it has no subscription.
	Live bool
	// Waiting tells that a subscription is a member of its group short of
	// its share, waiting for partitions another relay's lease still holds.
	Waiting bool
}
