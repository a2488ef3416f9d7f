package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
	seq      int      // numbers the subscriptions: each holds leases under its own name
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
	s.seq++
	sub := &subscription{s: s, topic: topic, holder: fmt.Sprintf("%s/%d", s.cfg.RelayID, s.seq),
		out: make(chan *message.Message), results: make(chan result, s.cfg.BatchSize),
		aggs: map[aggregate]*aggState{}, inflight: map[int64]*row{}, unflushed: map[int64]bool{},
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

// aggState is what a subscription holds of one aggregate.
type aggState struct {
	rows      []*row // claimed, not sent yet, in id order
	inflight  bool
	unflushed int // acked, not recorded as delivered yet
	// idleSweeps counts the sweeps that found the aggregate idle.
	idleSweeps int
}

func (a *aggState) idle() bool { return len(a.rows) == 0 && !a.inflight && a.unflushed == 0 }

type result struct {
	row   *row
	msg   *message.Message
	acked bool
}

type ack struct {
	id  int64
	agg aggregate
}

// subscription is one Subscribe call; run owns all of its state.
type subscription struct {
	s         *Subscriber
	topic     string
	holder    string // name of its leases
	out       chan *message.Message
	results   chan result
	aggs      map[aggregate]*aggState
	ready     []aggregate // aggregates whose next row can be sent
	inflight  map[int64]*row
	unflushed map[int64]bool
	queued    int // rows claimed and not sent yet
	acks      []ack
	release   []aggregate // idle aggregates to give back at the next claim
	lastSweep time.Time
	cursor    int64 // last row id of a full claim: the next claim reads on from it
	ctx       context.Context
	done      chan struct{}
}

func (sub *subscription) run(ctx context.Context) {
	s := sub.s
	sub.ctx = ctx
	defer close(sub.done)
	wake := s.notifier.add()
	defer s.notifier.remove(wake)
	poll := time.NewTicker(s.cfg.PollInterval)
	defer poll.Stop()
	renew := time.NewTicker(s.cfg.Lease / 3)
	defer renew.Stop()

	claimed := make(chan claimResult, 1)
	claiming, wantClaim := false, true
	var (
		ackDone  chan error
		flushing []ack
		nextRow  *row // the head about to be sent, and its message
		next     *message.Message
		// Rows acked but not recorded yet cost only their ids: they do not
		// count against the batch, so recording never stalls claiming.
		held      = func() int { return sub.queued + len(sub.inflight) }
		claimDone = func(c claimResult) {
			claiming = false
			if c.err != nil {
				if ctx.Err() == nil {
					s.cfg.Logger.Error("Claiming outbox rows failed", c.err, nil)
				}
				sub.release = append(sub.release, c.release...) // try again next time
				return
			}
			sub.add(c.rows)
			// A full claim means more rows wait: go on from the last one.
			full := len(c.rows) == c.limit
			wantClaim = wantClaim || full // keep a wake-up that came during the claim
			sub.cursor = 0
			if full {
				sub.cursor = c.rows[len(c.rows)-1].id
			}
		}
	)
	for {
		// Claim again as soon as a quarter of the batch has room, so that a
		// claim is under way while the previous one is being published.
		if room := s.cfg.BatchSize - held(); !claiming && wantClaim && room >= s.cfg.BatchSize/4 {
			claiming, wantClaim = true, false
			release := sub.takeIdle()
			// While draining a backlog, read on from the last row taken
			// (everything held is below it; the claim keeps each aggregate in
			// order wherever it starts). Once caught up, look from the start
			// again, for rows given back or committed late.
			after, heldIDs := sub.cursor, []int64{}
			if after == 0 {
				heldIDs = sub.heldIDs()
			}
			go func(limit int) {
				rows, err := s.store.claim(ctx, sub.holder, sub.topic, after, limit, heldIDs, release)
				claimed <- claimResult{rows, release, err, limit}
			}(room)
		}
		if ackDone == nil && len(sub.acks) > 0 {
			flushing, sub.acks = sub.acks, nil
			ackDone = make(chan error, 1)
			ids := ackIDs(flushing)
			go func() { ackDone <- s.store.delivered(context.WithoutCancel(ctx), ids) }()
		}
		var send chan *message.Message
		if len(sub.ready) > 0 {
			if head := sub.aggs[sub.ready[0]].rows[0]; head != nextRow {
				nextRow, next = head, sub.message(head)
			}
			send = sub.out
		}
		select {
		case <-ctx.Done():
			sub.shutdown(claiming, claimed, ackDone, flushing, claimDone)
			return
		case <-s.closing:
			sub.shutdown(claiming, claimed, ackDone, flushing, claimDone)
			return
		case send <- next:
			sub.dispatch(nextRow, next)
			nextRow, next = nil, nil
		case c := <-claimed:
			claimDone(c)
		case res := <-sub.results:
			if !res.acked && ackDone != nil {
				// Record the acks before the failure: nothing acked comes again.
				sub.flushed(flushing, <-ackDone)
				ackDone, flushing = nil, nil
			}
			sub.settle(ctx, res)
			if !res.acked {
				nextRow, next = nil, nil
			}
		case err := <-ackDone:
			sub.flushed(flushing, err)
			ackDone, flushing = nil, nil
			wantClaim = true // rows behind the acked ones may now be claimed
		case <-wake:
			wantClaim = true
		case <-poll.C:
			wantClaim = true
		case <-renew.C:
			if err := s.store.renew(ctx, sub.holder); err != nil && ctx.Err() == nil {
				s.cfg.Logger.Error("Renewing leases failed", err, nil)
			}
		}
	}
}

// message builds the Watermill message of r.
func (sub *subscription) message(r *row) *message.Message {
	md := metadataOf(r.name, r.version, r.aggregateType, r.aggregateID, r.decodedHeaders)
	md[events.MetaCreatedAt] = r.createdAt.UTC().Format(time.RFC3339Nano)
	md[MetaTopic] = r.topic
	msg := message.NewMessage(r.eventID.String(), r.payload)
	msg.Metadata = md
	return msg
}

func (sub *subscription) state(a aggregate) *aggState {
	st := sub.aggs[a]
	if st == nil {
		st = &aggState{}
		sub.aggs[a] = st
	}
	return st
}

func (sub *subscription) add(rows []*row) {
	for _, r := range rows {
		headers, err := decodeRowHeaders(r)
		if err != nil {
			// No broker can take it: set it aside, now. The rest of its
			// aggregate goes on.
			if err := sub.s.store.deadLetter(context.Background(), r, err.Error(), r.attempts); err != nil {
				sub.s.cfg.Logger.Error("Setting a broken row aside failed", err, nil)
			}
			continue
		}
		r.decodedHeaders = headers
		a := r.aggregate()
		st := sub.state(a)
		if len(st.rows) == 0 && !st.inflight {
			sub.ready = append(sub.ready, a)
		}
		st.rows = append(st.rows, r)
		sub.queued++
	}
}

func (sub *subscription) dispatch(r *row, msg *message.Message) {
	a := sub.ready[0]
	sub.ready = sub.ready[1:]
	st := sub.aggs[a]
	st.rows = st.rows[1:]
	st.inflight = true
	sub.queued--
	sub.inflight[r.id] = r
	// The message's context ends once it is acked or nacked, as Watermill
	// subscribers do.
	mctx, cancel := context.WithCancel(sub.ctx)
	msg.SetContext(mctx)
	go func() {
		defer cancel()
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
		case <-sub.done: // too late: the lease is given up and the row will come again
		}
	}()
}

// settle takes an ack or a nack of a message in flight.
func (sub *subscription) settle(ctx context.Context, res result) {
	s := sub.s
	r := res.row
	a := r.aggregate()
	st := sub.aggs[a]
	delete(sub.inflight, r.id)
	st.inflight = false
	if res.acked {
		st.unflushed++
		sub.unflushed[r.id] = true
		sub.acks = append(sub.acks, ack{r.id, a})
	} else {
		f := failure{reason: "nacked by the subscriber's consumer", countAttempt: true}
		if v, ok := s.reasons.LoadAndDelete(res.msg); ok {
			f = v.(failure)
		}
		attempts := r.attempts
		if f.countAttempt {
			attempts++
		}
		if attempts >= s.cfg.MaxAttempts {
			if err := s.store.deadLetter(ctx, r, fmt.Sprintf("%s (after %d attempts)", f.reason, attempts), attempts); err != nil {
				s.cfg.Logger.Error("Moving a failed row to the dead letters failed; it will be tried again", err,
					watermill.LogFields{"event_id": r.eventID})
				sub.forget(a)
				return
			}
		} else {
			if err := s.store.failed(ctx, r, f.countAttempt, f.reason); err != nil {
				s.cfg.Logger.Error("Recording a failed delivery failed", err, watermill.LogFields{"event_id": r.eventID})
			}
			// The aggregate now waits for the retry, whoever makes it.
			sub.forget(a)
			return
		}
	}
	if len(st.rows) > 0 {
		sub.ready = append(sub.ready, a)
	}
}

// forget drops what the subscription holds of a, unsent rows included:
// they are not delivered, so the next claim of a takes them again.
func (sub *subscription) forget(a aggregate) {
	st := sub.aggs[a]
	sub.queued -= len(st.rows)
	st.rows = nil
	if st.unflushed == 0 {
		delete(sub.aggs, a)
	}
}

// flushed takes the outcome of recording acks.
func (sub *subscription) flushed(acks []ack, err error) {
	if err != nil {
		sub.s.cfg.Logger.Error("Recording delivered rows failed; they will be delivered again", err, nil)
	}
	for _, k := range acks {
		delete(sub.unflushed, k.id)
		if st := sub.aggs[k.agg]; st != nil {
			st.unflushed--
		}
	}
}

// takeIdle removes the aggregates the subscription has not needed for a
// while and returns them, to be released with the next claim. Keeping a
// lease a little longer spares the lease table a release and a new lease
// for every event of a busy aggregate.
func (sub *subscription) takeIdle() []aggregate {
	release := sub.release
	sub.release = nil
	if time.Since(sub.lastSweep) < sub.s.cfg.Lease/6 {
		return release
	}
	sub.lastSweep = time.Now()
	for a, st := range sub.aggs {
		switch {
		case !st.idle():
			st.idleSweeps = 0
		case st.idleSweeps > 0:
			delete(sub.aggs, a)
			release = append(release, a)
		default:
			st.idleSweeps++
		}
	}
	return release
}

func (sub *subscription) heldIDs() []int64 {
	ids := make([]int64, 0, sub.queued+len(sub.inflight)+len(sub.unflushed))
	for _, st := range sub.aggs {
		for _, r := range st.rows {
			ids = append(ids, r.id)
		}
	}
	for id := range sub.inflight {
		ids = append(ids, id)
	}
	for id := range sub.unflushed {
		ids = append(ids, id)
	}
	return ids
}

// shutdown records the acks already received, waits briefly for messages
// in flight, and gives every lease back.
func (sub *subscription) shutdown(claiming bool, claimed <-chan claimResult, ackDone chan error, flushing []ack, claimDone func(claimResult)) {
	close(sub.out) // nothing more is sent
	ctx := context.Background()
	if claiming {
		claimDone(<-claimed)
	}
	// Messages in flight may still be acked; the others come again.
	deadline := time.After(2 * time.Second)
wait:
	for outstanding := len(sub.inflight); outstanding > 0; outstanding-- {
		select {
		case res := <-sub.results:
			if res.acked {
				sub.acks = append(sub.acks, ack{res.row.id, res.row.aggregate()})
			}
		case <-deadline:
			break wait
		}
	}
	if ackDone != nil {
		sub.flushed(flushing, <-ackDone)
	}
	if len(sub.acks) > 0 {
		if err := sub.s.store.delivered(ctx, ackIDs(sub.acks)); err != nil {
			sub.s.cfg.Logger.Error("Recording delivered rows failed; they will be delivered again", err, nil)
		}
	}
	if err := sub.s.store.releaseAll(ctx, sub.holder); err != nil {
		sub.s.cfg.Logger.Error("Giving leases back failed; they will expire", err, nil)
	}
}

type claimResult struct {
	rows    []*row
	release []aggregate
	err     error
	limit   int
}

func ackIDs(acks []ack) []int64 {
	ids := make([]int64, len(acks))
	for i, a := range acks {
		ids[i] = a.id
	}
	return ids
}
