package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/events"
)

// Subscriber is the fast read path: a Watermill Subscriber over the outbox
// table. It claims rows in batches, hands out many messages at once but at
// most one per aggregate at a time (the next one after the previous is
// acked), wakes up on LISTEN/NOTIFY with polling as the fallback, and
// records acks in batches. Several subscribers, in one process or many,
// share a table: each owns a fair share of its partitions (see store).
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
	seq      int      // numbers the subscriptions: each owns partitions under its own name
	instance string   // random, tells this Subscriber from any other with its RelayID
	// bytesHeld is what its subscriptions hold as MaxBytesInFlight counts
	// it, and bytesPeak the most they held at once.
	bytesHeld, bytesPeak atomic.Int64
}

type failure struct {
	reason       string
	countAttempt bool
	permanent    bool // no retry can cure it: dead-letter at once
}

var _ message.Subscriber = (*Subscriber)(nil)

// NewSubscriber returns a Subscriber on db (the pgx database/sql driver).
func NewSubscriber(db *sql.DB, cfg SubscriberConfig) (*Subscriber, error) {
	if db == nil {
		return nil, errors.New("relay: DB is nil")
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Subscriber{cfg: cfg, store: newStore(db, cfg), closing: make(chan struct{}), instance: uuid.NewString()[:8],
		notifier: newNotifier()}
	if !cfg.PollOnly {
		ctx, cancel := context.WithCancel(context.Background())
		s.stopNote = cancel
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.notifier.listen(ctx, db, cfg.Table, cfg.Logger)
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
	// Before anything is created after the table's name.
	if err := s.store.check(ctx); err != nil {
		return nil, err
	}
	seq := s.nextSeqLocked()
	// The holder name is new for every Subscriber, even under a fixed
	// RelayID: a restarted relay must not take for its own the partitions
	// its previous life may still be delivering (they come back when their
	// lease ends), nor may two relays given one RelayID share them.
	sub := &subscription{s: s, topic: topic, holder: fmt.Sprintf("%s/%s/%d", s.cfg.RelayID, s.instance, seq),
		out: make(chan *message.Message), results: make(chan result, s.cfg.BatchSize),
		aggs: map[aggregate]*aggState{}, inflight: map[int64]*row{}, unflushed: map[int64]int{},
		owned: map[int]bool{}, releasing: map[int]bool{}, blocked: map[aggregate]blocked{},
		retry: time.NewTimer(time.Hour), rescanT: time.NewTimer(time.Hour), done: make(chan struct{})}
	sub.retry.Stop()
	sub.rescanT.Stop()
	sub.live = newLiveness(s.store.db, s.cfg.Table, sub.holder, s.cfg.PollOnly)
	// Join the group now, so that a relay that cannot (a table split into
	// another number of partitions, say) fails at once.
	sub.renewed = time.Now()
	if err := sub.live.ensure(ctx); err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	own, err := s.store.rebalance(ctx, topic, sub.holder, nil, &sub.dead)
	if err != nil {
		sub.live.release()
		return nil, fmt.Errorf("relay: %w", err)
	}
	sub.apply(own, nil)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		sub.run(ctx)
	}()
	return sub.out, nil
}

// nextSeq numbers a subscription's name.
func (s *Subscriber) nextSeq() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nextSeqLocked()
}

func (s *Subscriber) nextSeqLocked() int {
	s.seq++
	return s.seq
}

// Fail nacks msg and records why. countAttempt false means the failure is
// not the message's own (the broker is away): it is retried without
// counting towards MaxAttempts. A reason that says it is permanent (with a
// Permanent() bool method, as the broker package's InvalidTopicError)
// sends the row to the dead letters at once.
func (s *Subscriber) Fail(msg *message.Message, reason error, countAttempt bool) {
	s.reasons.Store(msg, failure{reason: reason.Error(), countAttempt: countAttempt, permanent: permanent(reason)})
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

// rescanEvery is how often a caught-up subscription reads from the oldest
// row. Rows committed late below the cursor are found without it (see
// store.claim); it is a safety net for rows inserted without a transaction
// id, by hand.
const rescanEvery = time.Second

// aggState is what a subscription holds of one aggregate.
type aggState struct {
	rows      []*row // claimed, not sent yet, in id order
	inflight  bool
	partition int
}

// blocked is an aggregate waiting for the retry of its oldest row.
type blocked struct {
	until     time.Time
	partition int
}

type result struct {
	row   *row
	msg   *message.Message
	acked bool
}

type ack struct {
	id        int64
	partition int
	size      int64
}

// subscription is one Subscribe call; run owns all of its state.
type subscription struct {
	s         *Subscriber
	topic     string
	holder    string // its name as a member of the topic's group
	out       chan *message.Message
	results   chan result
	aggs      map[aggregate]*aggState
	ready     []aggregate // aggregates whose next row can be sent (stale entries are skipped)
	inflight  map[int64]*row
	unflushed map[int64]int // acked, not recorded yet: id -> partition
	queued    int           // rows claimed and not sent yet
	// heldBytes is the size of the rows held: queued, in flight, acked
	// and not recorded (see MaxBytesInFlight). freed counts the times it
	// went down; after a claim cut short by its byte budget (waitRoom),
	// the next waits for it to go down.
	heldBytes int64
	freed     uint64
	waitRoom  bool
	waitFreed uint64
	// rowBytes is the mean size of the rows the last claim read, to read
	// no more rows than the byte budget may take.
	rowBytes int64
	acks     []ack
	cursor   int64 // the next claim reads on from this row id
	// late is the transactions that were open when the cursor passed: the
	// next claim also reads their rows below it.
	late     openTxs
	caughtUp bool // the last claim took every row there was
	rescan   bool // the next claim starts from the oldest row
	// lastRescan is when a claim last read from the oldest row; rescanT
	// fires when the next such claim is due.
	lastRescan  time.Time
	rescanT     *time.Timer
	rescanArmed bool
	ctx         context.Context
	done        chan struct{}

	owned     map[int]bool // partitions leased to it, releasing ones included
	releasing map[int]bool // owned partitions given back once nothing of them is in flight
	minShare  int          // the fewest partitions it should own, the group being what it is
	renewed   time.Time    // when the last successful rebalance began: the leases run from then
	// renewFailing is set while rebalances fail (the database is away).
	renewFailing bool
	live         *liveness   // its lock of life
	claims       claimConn   // the connection it claims on
	dead         deadHolders // other holders seen without theirs
	waitingOn    string      // who it last said it waits for
	epoch        int         // counts giveUpAll calls
	blocked      map[aggregate]blocked
	retry        *time.Timer // fires when the earliest block ends
	retryAt      time.Time
}

func (sub *subscription) run(ctx context.Context) {
	s := sub.s
	sub.ctx = ctx
	defer close(sub.done)
	wake := s.notifier.add()
	defer s.notifier.remove(wake)
	poll := time.NewTicker(s.cfg.PollInterval)
	defer poll.Stop()
	rebalanceEvery := min(time.Second, s.cfg.Lease/3)
	rebalance := time.NewTimer(rebalanceEvery)
	defer rebalance.Stop()
	defer sub.retry.Stop()
	defer sub.rescanT.Stop()

	claimed := make(chan claimResult, 1)
	claiming, wantClaim := false, true
	claimRetry := time.NewTimer(time.Hour)
	claimRetry.Stop()
	defer claimRetry.Stop()
	claimFailures, claimPaused := 0, false
	var (
		ackDone  chan error
		flushing []ack
		nextRow  *row // the head about to be sent, and its message
		next     *message.Message
		// Rows acked but not recorded yet count too: what a relay that
		// dies or stalls may have published without recording it stays
		// within BatchSize.
		held      = func() int { return sub.queued + len(sub.inflight) + len(sub.unflushed) }
		claimDone = func(c claimResult) {
			claiming = false
			if c.err != nil {
				// Wait before the next claim, longer after each failure in
				// a row: a failing claim must not spin, whatever wakes it.
				claimFailures++
				pause := s.cfg.backoff(claimFailures)
				if ctx.Err() == nil && claimFailures <= 3 {
					s.cfg.Logger.Error("Claiming outbox rows failed; trying again", c.err,
						watermill.LogFields{"retry_in": pause.String(), "failures": claimFailures})
				}
				claimPaused = true
				claimRetry.Reset(pause)
				return
			}
			if claimFailures > 0 {
				s.cfg.Logger.Info("Claiming outbox rows works again", watermill.LogFields{"failures": claimFailures})
				claimFailures = 0
			}
			fromStart := c.query.after == 0
			sub.add(c.rows, fromStart, c.started)
			if n := int64(len(c.rows)); n > 0 || c.cut {
				total := c.cutSize
				for _, r := range c.rows {
					total += r.size
				}
				if c.cut {
					n++
				}
				sub.rowBytes = total / n
			}
			// Cut short by its byte budget: claim again once bytes held
			// were freed, not before (it would stop at the same row).
			sub.waitRoom, sub.waitFreed = c.cut, c.query.freed
			// A full claim means more rows wait: go on from the last one
			// (a full rescan goes back to it). Otherwise go on from the
			// newest row seen.
			full := len(c.rows) == c.query.limit || c.cut
			wantClaim = wantClaim || full // keep a wake-up that came during the claim
			sub.caughtUp = !full
			if n := len(c.rows); n > 0 && (c.rows[n-1].id > sub.cursor || full && fromStart) {
				sub.cursor = c.rows[n-1].id
			}
			// Rows the claim could not see yet, below the new cursor, belong
			// to the transactions open in its snapshot: the next claims read
			// theirs. The earlier late transactions' rows were read by this
			// claim (they come first, being below the cursor) unless they
			// alone filled it.
			below := 0
			for _, r := range c.rows {
				if r.id <= c.query.after {
					below++
				}
			}
			if full && below == len(c.rows) {
				sub.late = sub.late.merge(c.open)
			} else {
				sub.late = c.open
			}
		}
	)
	// Rebalances run beside the loop, one at a time, so that a slow one
	// does not hold up sending while the leases hold. Rebalance often while
	// partitions change hands, so that a relay that joins or leaves is
	// given its share within moments.
	rebalanced := make(chan rebalanceResult, 1)
	rebalancing, rebalanceAgain := false, false
	doRebalance := func() {
		if rebalancing {
			rebalanceAgain = true
			return
		}
		rebalancing = true
		req := sub.rebalanceRequest()
		go func() { rebalanced <- sub.rebalance(ctx, req) }()
	}
	rebalanceDone := func(r rebalanceResult) {
		rebalancing = false
		if sub.rebalanced(r) {
			wantClaim = true
		}
		every := rebalanceEvery
		if len(sub.releasing) > 0 || len(sub.owned) < sub.minShare || sub.renewFailing || rebalanceAgain {
			every = min(every, 100*time.Millisecond)
		}
		rebalanceAgain = false
		rebalance.Reset(every)
	}

	if len(sub.owned) < sub.minShare {
		rebalance.Reset(100 * time.Millisecond)
	}
	for {
		// Claim again as soon as a quarter of the batch has room, in rows
		// and in bytes, so that a claim is under way while the previous
		// one is being published. A row larger than the byte bound is
		// claimed only when nothing else is held.
		room, byteRoom := s.cfg.BatchSize-held(), s.cfg.MaxBytesInFlight-sub.heldBytes
		if !claiming && !claimPaused && wantClaim && room >= max(s.cfg.BatchSize/4, 1) &&
			byteRoom >= max(s.cfg.MaxBytesInFlight/4, 1) &&
			!(sub.waitRoom && sub.freed == sub.waitFreed) {
			if parts, any := sub.claimable(); any {
				claiming, wantClaim = true, false
				// Claims read on from the cursor, and below it the rows of the
				// transactions that were open when it passed them (see
				// store.claim). They read from the oldest row instead when
				// partitions or blocked aggregates come back and, once caught
				// up, every rescanEvery as a safety net for rows written
				// without a transaction id. Not every claim: while a long
				// transaction elsewhere holds vacuum back, the oldest part of
				// the index is full of delivered rows to step over. Rows held
				// already and aggregates waiting for a retry are left out: a
				// rescan may leave the cursor below rows held.
				q := claimQuery{topic: sub.topic, parts: parts, after: sub.cursor, late: sub.late, limit: room,
					held: sub.heldIDs(), blocked: sub.stillBlocked(),
					budget: byteRoom, force: sub.heldBytes == 0, freed: sub.freed}
				// PostgreSQL reads every row the claim reads whole, taken or
				// not: read little more than the budget may take.
				if sub.rowBytes > 0 {
					q.limit = int(min(int64(room), byteRoom/sub.rowBytes+2))
				}
				switch now := time.Now(); {
				case sub.rescan || sub.cursor == 0 || sub.caughtUp && now.Sub(sub.lastRescan) >= rescanEvery:
					q.after, sub.rescan, sub.lastRescan = 0, false, now
				case sub.caughtUp && !sub.rescanArmed:
					sub.rescanArmed = true
					sub.rescanT.Reset(sub.lastRescan.Add(rescanEvery).Sub(now))
				}
				go func() {
					started := time.Now()
					got, err := s.store.claim(ctx, &sub.claims, q)
					claimed <- claimResult{rows: got.rows, open: got.open, cut: got.cut, cutSize: got.cutSize, err: err,
						query: q, started: started}
				}()
			}
		}
		if ackDone == nil && len(sub.acks) > 0 {
			flushing, sub.acks = sub.acks, nil
			ackDone = make(chan error, 1)
			ids := ackIDs(flushing)
			go func() { ackDone <- s.store.delivered(context.WithoutCancel(ctx), ids) }()
		}
		var send chan *message.Message
		if head := sub.head(); head != nil && sub.maySend() {
			if head != nextRow {
				nextRow, next = head, sub.message(head)
			}
			send = sub.out
		}
		select {
		case <-ctx.Done():
			if rebalancing { // it must not take partitions back after they are given back
				<-rebalanced
				rebalancing = false
			}
			sub.shutdown(claiming, claimed, ackDone, flushing, claimDone)
			return
		case <-s.closing:
			if rebalancing {
				<-rebalanced
				rebalancing = false
			}
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
		case err := <-ackDone:
			sub.flushed(flushing, err)
			ackDone, flushing = nil, nil
			wantClaim = true // rows behind the acked ones may now be claimed
			if sub.anyDrained() {
				doRebalance() // give it back now: another relay waits for it
			}
		case <-wake.rows:
			wantClaim = true
		case <-wake.rebalance:
			doRebalance()
		case <-sub.live.lostC():
			// Its session is gone, and with it the lock the others read:
			// they may take its partitions within moments. Stop at once.
			s.cfg.Logger.Error("Lost the connection holding the relay's liveness lock; giving the partitions up", nil,
				watermill.LogFields{"relay": sub.holder})
			sub.giveUpAll()
			sub.live.forget()
			rebalance.Reset(100 * time.Millisecond)
		case <-poll.C:
			wantClaim = true
		case <-sub.retry.C:
			sub.retried()
			wantClaim = true
		case <-sub.rescanT.C:
			sub.rescanArmed = false
			wantClaim = true
		case <-claimRetry.C:
			claimPaused, wantClaim = false, true
		case <-rebalance.C:
			doRebalance()
		case r := <-rebalanced:
			rebalanceDone(r)
		}
	}
}

// head is the row to send next, nil if none.
func (sub *subscription) head() *row {
	for len(sub.ready) > 0 {
		st := sub.aggs[sub.ready[0]]
		if st != nil && len(st.rows) > 0 && !st.inflight {
			return st.rows[0]
		}
		sub.ready = sub.ready[1:] // forgotten or sent meanwhile
	}
	return nil
}

// claimable is the owned partitions that are not being given back, nil
// when that is all of them; any is false when there is none.
func (sub *subscription) claimable() (parts []int, any bool) {
	parts = sub.kept()
	if len(parts) == sub.s.cfg.Partitions {
		return nil, true
	}
	return parts, len(parts) > 0
}

// kept is the owned partitions not being given back, in order.
func (sub *subscription) kept() []int {
	var parts []int
	for p := range sub.owned {
		if !sub.releasing[p] {
			parts = append(parts, p)
		}
	}
	slices.Sort(parts)
	return parts
}

// rebalanceRequest is what a rebalance starts from: the partitions being
// given back that are drained, and the epoch it belongs to.
type rebalanceRequest struct {
	release []int
	epoch   int
}

type rebalanceResult struct {
	req     rebalanceRequest
	own     ownership
	err     error
	started time.Time // the leases it renews run from then
}

func (sub *subscription) rebalanceRequest() rebalanceRequest {
	req := rebalanceRequest{epoch: sub.epoch}
	for p := range sub.releasing {
		if sub.drained(p) {
			req.release = append(req.release, p)
		}
	}
	return req
}

// rebalance renews the subscription's partitions, gives back those of req,
// and takes its share of the free ones. It runs beside the run loop and
// touches none of its state.
func (sub *subscription) rebalance(ctx context.Context, req rebalanceRequest) rebalanceResult {
	s := sub.s
	res := rebalanceResult{req: req, started: time.Now()}
	// Bounded, so that a database that hangs cannot delay the decision to
	// give the partitions up.
	rctx, cancel := context.WithTimeout(ctx, s.cfg.Lease/3)
	defer cancel()
	res.err = sub.live.ensure(rctx)
	if res.err == nil {
		res.own, res.err = s.store.rebalance(rctx, sub.topic, sub.holder, req.release, &sub.dead)
	}
	return res
}

// rebalanced takes the outcome of a rebalance, in the run loop. It reports
// whether the subscription gained partitions.
func (sub *subscription) rebalanced(r rebalanceResult) bool {
	s := sub.s
	if r.req.epoch != sub.epoch {
		// It began before the subscription gave everything up: what it
		// says it owns may be out of date. The next one tells.
		return false
	}
	if errors.Is(r.err, errLiveLockTaken) && len(sub.owned) == 0 {
		// Its earlier session still holds the lock on the server, which
		// has not noticed it is gone: join again under a new name, and free
		// the old name's partitions at once (nothing sends under it: this
		// subscription gave everything up when it lost the session).
		old := sub.holder
		sub.holder = fmt.Sprintf("%s/%s/%d", s.cfg.RelayID, uuid.NewString()[:8], s.nextSeq())
		sub.live = newLiveness(s.store.db, s.cfg.Table, sub.holder, s.cfg.PollOnly)
		s.cfg.Logger.Info("Joining again under a new name: the liveness lock of the old one is held by its lost session",
			watermill.LogFields{"relay": sub.holder, "was": old})
		if err := s.store.leave(sub.ctx, sub.topic, old); err != nil {
			s.cfg.Logger.Error("Freeing the partitions of the old name failed; they are free when its lease ends", err,
				watermill.LogFields{"relay": sub.holder, "was": old})
		}
	}
	if r.err != nil {
		if sub.ctx.Err() == nil && !sub.renewFailing {
			s.cfg.Logger.Error("Renewing the partitions failed; trying again, they are kept until their lease ends", r.err, nil)
		}
		sub.renewFailing = true
		// Stop sending well before the leases may have ended and another
		// relay taken the partitions: two relays must never send the rows
		// of one aggregate. (maySend already stops every send then; failed
		// renewals are tried again every 100 ms.)
		if len(sub.owned) > 0 && time.Since(sub.renewed) > s.cfg.Lease*2/3 {
			s.cfg.Logger.Error("Partitions not renewed for most of their lease; giving them up", nil,
				watermill.LogFields{"relay": sub.holder})
			sub.giveUpAll()
		}
		return false
	}
	for _, h := range r.own.takenOver {
		s.cfg.Logger.Info("Took over the partitions of a relay whose connection is gone", watermill.LogFields{
			"relay": sub.holder, "dead_relay": h})
	}
	sub.sayWaiting(r.own)
	if sub.renewFailing {
		s.cfg.Logger.Info("Partitions renewed again", watermill.LogFields{"relay": sub.holder})
		sub.renewFailing = false
	}
	sub.renewed = r.started
	return sub.apply(r.own, r.req.release)
}

// apply takes the outcome of a rebalance that gave back release.
func (sub *subscription) apply(own ownership, release []int) bool {
	s := sub.s
	for _, p := range release {
		delete(sub.releasing, p)
		delete(sub.owned, p)
	}
	now := map[int]bool{}
	for _, p := range own.owned {
		now[p] = true
	}
	for p := range sub.owned {
		if !now[p] {
			// Its lease ran out and another relay took it: stop sending its rows.
			s.cfg.Logger.Error("Lost a partition to another relay after its lease ran out", nil,
				watermill.LogFields{"partition": p, "relay": sub.holder})
			sub.drop(p)
			delete(sub.owned, p)
			delete(sub.releasing, p)
		}
	}
	sub.minShare = s.cfg.Partitions / own.members
	gained := false
	for p := range now {
		if !sub.owned[p] {
			sub.owned[p], gained = true, true
		}
	}
	if kept := sub.kept(); len(kept) > own.fair {
		for _, p := range kept[own.fair:] {
			sub.releasing[p] = true
			sub.drop(p)
		}
	}
	if gained {
		sub.rescan = true // the new partitions' rows may lie anywhere
	}
	return gained
}

// maySend tells whether the subscription may send rows now: it holds its
// liveness lock and its leases were renewed within two thirds of their
// length. Checked before every send, so that a relay that was paused or
// stalled sends nothing once it may have lost its partitions.
func (sub *subscription) maySend() bool {
	return sub.live.ok() && time.Since(sub.renewed) < sub.s.cfg.Lease*2/3
}

// giveUpAll forgets every partition and all that was claimed of them; a
// rebalance already under way is then disregarded.
func (sub *subscription) giveUpAll() {
	sub.epoch++
	for p := range sub.owned {
		sub.drop(p)
	}
	clear(sub.owned)
	clear(sub.releasing)
}

// sayWaiting logs, once per change, who holds the partitions a
// subscription short of its share waits for, so that an operator sees why
// delivery of their events waits.
func (sub *subscription) sayWaiting(own ownership) {
	var b strings.Builder
	for _, h := range own.waitingOn {
		fmt.Fprintf(&b, "%s:%d;", h.relay, h.partitions)
	}
	if b.String() == sub.waitingOn {
		return
	}
	sub.waitingOn = b.String()
	for _, h := range own.waitingOn {
		why := "its lease runs until " + h.until.Format(time.RFC3339)
		if !h.live {
			why = "it is not running (its liveness lock is not held): taken over within seconds; if it is a relay of an " +
				"earlier version, which holds no lock, when its lease ends at " + h.until.Format(time.RFC3339)
		}
		sub.s.cfg.Logger.Info("Waiting for partitions another relay holds; their events wait meanwhile", watermill.LogFields{
			"relay": sub.holder, "held_by": h.relay, "partitions": h.partitions, "why": why})
	}
}

// anyDrained tells whether a partition being given back is ready to go.
func (sub *subscription) anyDrained() bool {
	for p := range sub.releasing {
		if sub.drained(p) {
			return true
		}
	}
	return false
}

// drained tells whether nothing of partition p is in flight or waits to be
// recorded, so that the next owner starts where this one stopped.
func (sub *subscription) drained(p int) bool {
	for _, r := range sub.inflight {
		if r.partition == p {
			return false
		}
	}
	for _, q := range sub.unflushed {
		if q == p {
			return false
		}
	}
	for _, k := range sub.acks {
		if k.partition == p {
			return false
		}
	}
	return true
}

// drop forgets everything unsent of partition p.
func (sub *subscription) drop(p int) {
	for a, st := range sub.aggs {
		if st.partition == p {
			sub.forget(a)
		}
	}
	for a, b := range sub.blocked {
		if b.partition == p {
			delete(sub.blocked, a) // the next owner reads its retry time off the row
		}
	}
}

// block holds back aggregate a until the retry of its oldest row.
func (sub *subscription) block(a aggregate, partition int, until time.Time) {
	if st := sub.aggs[a]; st != nil {
		sub.forget(a)
	}
	sub.blocked[a] = blocked{until: until, partition: partition}
	if sub.retryAt.IsZero() || until.Before(sub.retryAt) {
		sub.retryAt = until
		sub.retry.Reset(time.Until(until))
	}
}

// stillBlocked is the aggregates whose retry is not due yet.
func (sub *subscription) stillBlocked() []aggregate {
	var out []aggregate
	now := time.Now()
	for a, b := range sub.blocked {
		if b.until.After(now) {
			out = append(out, a)
		}
	}
	return out
}

// retried runs when the earliest block ends: the next claim reads from the
// oldest row, which unblocks the aggregates whose time has come.
func (sub *subscription) retried() {
	sub.retryAt = time.Time{}
	sub.rescan = true
	now := time.Now()
	for _, b := range sub.blocked {
		if b.until.After(now) && (sub.retryAt.IsZero() || b.until.Before(sub.retryAt)) {
			sub.retryAt = b.until
		}
	}
	if !sub.retryAt.IsZero() {
		sub.retry.Reset(time.Until(sub.retryAt))
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

// add queues claimed rows. fromStart tells the claim read from the oldest
// row, started when it began: only such a claim, begun after a block
// ended, may unblock an aggregate, since only it is sure to return the
// aggregate's oldest row first.
func (sub *subscription) add(rows []*row, fromStart bool, started time.Time) {
	now := time.Now()
	for _, r := range rows {
		if !sub.owned[r.partition] || sub.releasing[r.partition] {
			continue // given up while the claim ran
		}
		a := r.aggregate()
		if b, ok := sub.blocked[a]; ok {
			if !fromStart || !started.After(b.until) {
				continue
			}
			delete(sub.blocked, a)
		}
		if r.wait > 0 {
			sub.block(a, r.partition, now.Add(r.wait))
			continue
		}
		headers, err := decodeRowHeaders(r)
		if err != nil {
			// No broker can take it: set it aside, now. The rest of its
			// aggregate goes on.
			if err := sub.s.store.deadLetter(context.Background(), r, err.Error(), r.attempts); err != nil {
				sub.s.cfg.Logger.Error("Setting a broken row aside failed", err, nil)
				sub.block(a, r.partition, now.Add(sub.s.cfg.backoff(1)))
			}
			continue
		}
		r.decodedHeaders = headers
		st := sub.aggs[a]
		if st == nil {
			st = &aggState{partition: r.partition}
			sub.aggs[a] = st
		}
		if len(st.rows) == 0 && !st.inflight {
			sub.ready = append(sub.ready, a)
		}
		st.rows = append(st.rows, r)
		sub.queued++
		sub.hold(r.size)
	}
}

// hold counts n bytes more held.
func (sub *subscription) hold(n int64) {
	sub.heldBytes += n
	held := sub.s.bytesHeld.Add(n)
	for peak := sub.s.bytesPeak.Load(); held > peak && !sub.s.bytesPeak.CompareAndSwap(peak, held); {
		peak = sub.s.bytesPeak.Load()
	}
}

// free counts n bytes held no more.
func (sub *subscription) free(n int64) {
	sub.heldBytes -= n
	sub.s.bytesHeld.Add(-n)
	sub.freed++
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
		case <-sub.done: // too late: the partition is given up and the row will come again
		}
	}()
}

// settle takes an ack or a nack of a message in flight.
func (sub *subscription) settle(ctx context.Context, res result) {
	r := res.row
	a := r.aggregate()
	st := sub.aggs[a]
	delete(sub.inflight, r.id)
	st.inflight = false
	if res.acked {
		sub.unflushed[r.id] = r.partition
		sub.acks = append(sub.acks, ack{r.id, r.partition, r.size})
	} else {
		sub.free(r.size) // it is read again for its retry
		if !sub.nacked(ctx, r, res.msg) {
			return
		}
	}
	if len(st.rows) > 0 {
		sub.ready = append(sub.ready, a)
	} else {
		delete(sub.aggs, a)
	}
}

// nacked handles a failed delivery of r: a retry later, or the dead
// letters after the last attempt. It reports whether the aggregate goes on
// at once (the row is set aside) rather than waiting for the retry.
func (sub *subscription) nacked(ctx context.Context, r *row, msg *message.Message) bool {
	s := sub.s
	f := failure{reason: "nacked by the subscriber's consumer", countAttempt: true}
	if v, ok := s.reasons.LoadAndDelete(msg); ok {
		f = v.(failure)
	}
	attempts := r.attempts
	if f.countAttempt {
		attempts++
	}
	if f.permanent || attempts >= s.cfg.MaxAttempts {
		reason := fmt.Sprintf("%s (after %d attempts)", f.reason, attempts)
		if f.permanent {
			reason = "refused for good: " + f.reason
		}
		err := s.store.deadLetter(ctx, r, reason, attempts)
		if err == nil {
			return true
		}
		s.cfg.Logger.Error("Moving a failed row to the dead letters failed; it will be tried again", err,
			watermill.LogFields{"event_id": r.eventID})
		sub.block(r.aggregate(), r.partition, time.Now().Add(s.cfg.backoff(attempts)))
		return false
	}
	wait, err := s.store.failed(ctx, r, f.countAttempt, f.reason)
	if err != nil {
		s.cfg.Logger.Error("Recording a failed delivery failed", err, watermill.LogFields{"event_id": r.eventID})
	}
	sub.block(r.aggregate(), r.partition, time.Now().Add(wait))
	return false
}

// forget drops the unsent rows of a: they are not delivered, so a later
// claim takes them again.
func (sub *subscription) forget(a aggregate) {
	st := sub.aggs[a]
	sub.queued -= len(st.rows)
	for _, r := range st.rows {
		sub.free(r.size)
	}
	st.rows = nil
	if !st.inflight {
		delete(sub.aggs, a)
	}
}

// flushed takes the outcome of recording acks.
func (sub *subscription) flushed(acks []ack, err error) {
	if err != nil {
		sub.s.cfg.Logger.Error("Recording delivered rows failed; they will be delivered again", err, nil)
	}
	for _, k := range acks {
		if _, ok := sub.unflushed[k.id]; ok {
			delete(sub.unflushed, k.id)
			sub.free(k.size)
		}
	}
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
// in flight, and gives every partition back.
func (sub *subscription) shutdown(claiming bool, claimed <-chan claimResult, ackDone chan error, flushing []ack, claimDone func(claimResult)) {
	close(sub.out) // nothing more is sent
	ctx := context.Background()
	if claiming {
		claimDone(<-claimed)
	}
	// Messages in flight may still be acked; the others come again.
	deadline := time.After(sub.s.cfg.CloseTimeout)
wait:
	for outstanding := len(sub.inflight); outstanding > 0; outstanding-- {
		select {
		case res := <-sub.results:
			if res.acked {
				sub.acks = append(sub.acks, ack{res.row.id, res.row.partition, res.row.size})
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
	if err := sub.s.store.leave(ctx, sub.topic, sub.holder); err != nil {
		sub.s.cfg.Logger.Error("Giving the partitions back failed; they will be free when their lease ends", err, nil)
	}
	sub.live.release()
	sub.claims.reset()
}

type claimResult struct {
	rows    []*row
	open    openTxs // transactions open in the claim's snapshot
	cut     bool    // stopped at a row its byte budget had no room for
	cutSize int64
	err     error
	query   claimQuery
	started time.Time
}

func ackIDs(acks []ack) []int64 {
	ids := make([]int64, len(acks))
	for i, a := range acks {
		ids[i] = a.id
	}
	return ids
}

// permanent tells an error no retry can cure: it says so with a
// Permanent() bool method (the broker package's InvalidTopicError does).
func permanent(err error) bool {
	var p interface{ Permanent() bool }
	return errors.As(err, &p) && p.Permanent()
}
