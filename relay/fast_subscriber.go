package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/entoutbox/entoutbox/events"
)

// Subscriber is the fast read path: a Watermill Subscriber over the outbox
// table. It claims rows in batches with FOR UPDATE SKIP LOCKED under a
// lease, hands out many messages at once but at most one per aggregate at a
// time (the next one after the previous is acked), wakes up on
// LISTEN/NOTIFY with polling as the fallback, and records acks in batches.
// Several subscribers, in one process or many, share a table safely.
//
// Subscribe to AllTopics to read every row (the relay does), or to one
// destination topic.
type Subscriber struct {
	cfg      SubscriberConfig
	store    *store
	notifier *notifier

	mu       sync.Mutex
	closed   bool
	closing  chan struct{}
	wg       sync.WaitGroup
	stopNote context.CancelFunc
	reasons  sync.Map // *message.Message -> failure
}

type failure struct {
	reason       string
	countAttempt bool
}

// NewSubscriber returns a Subscriber on db (the pgx database/sql driver).
func NewSubscriber(db *sql.DB, cfg SubscriberConfig) (*Subscriber, error) {
	if db == nil {
		return nil, errors.New("relay: DB is nil")
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Subscriber{cfg: cfg, store: newStore(db, cfg), closing: make(chan struct{}),
		notifier: &notifier{waiters: map[chan struct{}]bool{}}}
	if !cfg.PollOnly {
		ctx, cancel := context.WithCancel(context.Background())
		s.stopNote = cancel
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.notifier.listen(ctx, db, notifyChannel(cfg.Table), cfg.Logger)
		}()
	}
	return s, nil
}

// Subscribe starts reading the rows of topic (AllTopics for every topic).
// The channel closes when ctx ends or the Subscriber is closed.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("relay: subscriber is closed")
	}
	if topic == AllTopics {
		topic = ""
	}
	sub := &subscription{s: s, topic: topic, out: make(chan *message.Message),
		results: make(chan result, s.cfg.BatchSize), queues: map[string]*aggQueue{}, inflight: map[int64]*row{},
		done: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		sub.run(ctx)
	}()
	return sub.out, nil
}

// Fail nacks msg and records why. countAttempt false means the failure is
// not the message's own (the broker is away): it is retried without
// counting towards MaxAttempts.
func (s *Subscriber) Fail(msg *message.Message, reason error, countAttempt bool) {
	s.reasons.Store(msg, failure{reason: reason.Error(), countAttempt: countAttempt})
	msg.Nack()
}

// Close stops every subscription: acks received so far are recorded, and
// every row still held is released for the next reader.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	s.mu.Unlock()
	if s.stopNote != nil {
		s.stopNote()
	}
	s.wg.Wait()
	return nil
}

type aggQueue struct {
	rows     []*row
	inflight bool
}

type result struct {
	row   *row
	msg   *message.Message
	acked bool
}

// subscription is one Subscribe call; run owns all of its state.
type subscription struct {
	s        *Subscriber
	topic    string
	out      chan *message.Message
	results  chan result
	queues   map[string]*aggQueue // by aggregate
	ready    []string             // aggregates whose head can be sent
	inflight map[int64]*row
	held     int // rows in memory, in flight or queued
	acks     []int64
	done     chan struct{} // closed when run returns
}

func aggKey(r *row) string { return r.aggregateType + "\x00" + r.aggregateID }

func (sub *subscription) run(ctx context.Context) {
	s := sub.s
	defer close(sub.out)
	defer close(sub.done)
	wake := s.notifier.add()
	defer s.notifier.remove(wake)
	poll := time.NewTicker(s.cfg.PollInterval)
	defer poll.Stop()
	renew := time.NewTicker(s.cfg.Lease / 3)
	defer renew.Stop()

	claimed := make(chan []*row, 1)
	claiming, wantClaim := false, true
	var (
		ackDone chan error
		nextRow *row // the head about to be sent, and its message
		next    *message.Message
	)
	for {
		if !claiming && wantClaim && sub.held < s.cfg.BatchSize/2+1 {
			claiming, wantClaim = true, false
			go func(limit int) {
				rows, err := s.store.claim(ctx, sub.topic, limit)
				if err != nil && ctx.Err() == nil {
					s.cfg.Logger.Error("Claiming outbox rows failed", err, nil)
				}
				claimed <- rows
			}(s.cfg.BatchSize - sub.held)
		}
		if ackDone == nil && len(sub.acks) > 0 {
			ids := sub.acks
			sub.acks = nil
			ackDone = make(chan error, 1)
			go func() { ackDone <- s.store.delivered(context.WithoutCancel(ctx), ids) }()
		}
		var send chan *message.Message
		if len(sub.ready) > 0 {
			if head := sub.queues[sub.ready[0]].rows[0]; head != nextRow {
				nextRow, next = head, sub.message(head)
			}
			send = sub.out
		}
		select {
		case <-ctx.Done():
			sub.shutdown(claiming, claimed, ackDone)
			return
		case <-s.closing:
			sub.shutdown(claiming, claimed, ackDone)
			return
		case send <- next:
			sub.dispatch(nextRow, next)
			nextRow, next = nil, nil
		case rows := <-claimed:
			claiming = false
			sub.add(rows)
			// A full claim means more rows may wait.
			wantClaim = len(rows) > 0 && len(rows) >= s.cfg.BatchSize/2
		case res := <-sub.results:
			sub.settle(ctx, res)
		case err := <-ackDone:
			ackDone = nil
			if err != nil {
				s.cfg.Logger.Error("Recording delivered rows failed; they will be delivered again", err, nil)
			}
			wantClaim = true // rows behind the acked ones may now be claimed
		case <-wake:
			wantClaim = true
		case <-poll.C:
			wantClaim = true
		case <-renew.C:
			if ids := sub.heldIDs(); len(ids) > 0 {
				if err := s.store.renew(ctx, ids); err != nil {
					s.cfg.Logger.Error("Renewing leases failed", err, nil)
				}
			}
		}
	}
}

// message builds the Watermill message of r.
func (sub *subscription) message(r *row) *message.Message {
	headers, _ := decodeHeaders(r.headers) // checked when the row was added
	md := metadataOf(r.name, r.version, r.aggregateType, r.aggregateID, headers)
	md[events.MetaCreatedAt] = r.createdAt.UTC().Format(time.RFC3339Nano)
	md[MetaTopic] = r.topic
	msg := message.NewMessage(r.eventID.String(), r.payload)
	msg.Metadata = md
	return msg
}

func (sub *subscription) add(rows []*row) {
	for _, r := range rows {
		if _, err := decodeRowHeaders(r); err != nil {
			// No broker can take it: set it aside, now.
			if err := sub.s.store.deadLetter(context.Background(), r, err.Error()); err != nil {
				sub.s.cfg.Logger.Error("Setting a broken row aside failed", err, nil)
			}
			continue
		}
		k := aggKey(r)
		q := sub.queues[k]
		if q == nil {
			q = &aggQueue{}
			sub.queues[k] = q
		}
		if len(q.rows) == 0 && !q.inflight {
			sub.ready = append(sub.ready, k)
		}
		q.rows = append(q.rows, r)
		sub.held++
	}
}

func (sub *subscription) dispatch(r *row, msg *message.Message) {
	k := sub.ready[0]
	sub.ready = sub.ready[1:]
	q := sub.queues[k]
	q.rows = q.rows[1:]
	q.inflight = true
	sub.inflight[r.id] = r
	go func() {
		res := result{row: r, msg: msg}
		select {
		case <-msg.Acked():
			res.acked = true
		case <-msg.Nacked():
		case <-sub.done:
			return
		}
		select {
		case sub.results <- res:
		case <-sub.done: // too late: the row was released and will come again
		}
	}()
}

// settle takes an ack or a nack of a message in flight.
func (sub *subscription) settle(ctx context.Context, res result) {
	s := sub.s
	r := res.row
	delete(sub.inflight, r.id)
	sub.held--
	k := aggKey(r)
	q := sub.queues[k]
	q.inflight = false
	if res.acked {
		sub.acks = append(sub.acks, r.id)
	} else {
		f := failure{reason: "nacked by the subscriber's consumer", countAttempt: true}
		if v, ok := s.reasons.LoadAndDelete(res.msg); ok {
			f = v.(failure)
		}
		attempts := r.attempts
		if f.countAttempt {
			attempts++
		}
		var err error
		if attempts >= s.cfg.MaxAttempts {
			err = s.store.deadLetter(ctx, r, fmt.Sprintf("%s (after %d attempts)", f.reason, attempts))
		} else {
			err = s.store.failed(ctx, r, f.countAttempt, f.reason)
			// The rest of the aggregate waits behind the failed row; give it
			// back so that any relay can take it in order later.
			if err == nil && len(q.rows) > 0 {
				err = s.store.release(ctx, rowIDs(q.rows))
				sub.held -= len(q.rows)
				q.rows = nil
			}
		}
		if err != nil {
			s.cfg.Logger.Error("Recording a failed delivery failed; the lease will expire", err,
				watermill.LogFields{"event_id": r.eventID})
			sub.held -= len(q.rows)
			q.rows = nil
		}
	}
	if len(q.rows) > 0 {
		sub.ready = append(sub.ready, k)
	} else {
		delete(sub.queues, k)
	}
}

func (sub *subscription) heldIDs() []int64 {
	ids := make([]int64, 0, sub.held)
	for _, q := range sub.queues {
		ids = append(ids, rowIDs(q.rows)...)
	}
	return append(ids, slicesKeys(sub.inflight)...)
}

// shutdown records the acks already received, waits briefly for messages
// in flight, and releases every row still held.
func (sub *subscription) shutdown(claiming bool, claimed chan []*row, ackDone chan error) {
	ctx := context.Background()
	if claiming {
		sub.add(<-claimed)
	}
	// Messages in flight may still be acked; a nacked one is released below
	// with the rest, without counting an attempt.
	deadline := time.After(5 * time.Second)
wait:
	for outstanding := len(sub.inflight); outstanding > 0; outstanding-- {
		select {
		case res := <-sub.results:
			if res.acked {
				delete(sub.inflight, res.row.id)
				sub.acks = append(sub.acks, res.row.id)
			}
		case <-deadline:
			break wait
		}
	}
	if ackDone != nil {
		<-ackDone
	}
	if len(sub.acks) > 0 {
		if err := sub.s.store.delivered(ctx, sub.acks); err != nil {
			sub.s.cfg.Logger.Error("Recording delivered rows failed; they will be delivered again", err, nil)
		}
	}
	if ids := sub.heldIDs(); len(ids) > 0 {
		if err := sub.s.store.release(ctx, ids); err != nil {
			sub.s.cfg.Logger.Error("Releasing held rows failed; their leases will expire", err, nil)
		}
	}
}

func rowIDs(rows []*row) []int64 {
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.id
	}
	return ids
}

func slicesKeys(m map[int64]*row) []int64 {
	out := make([]int64, 0, len(m))
	for k := range maps.Keys(m) {
		out = append(out, k)
	}
	return out
}
