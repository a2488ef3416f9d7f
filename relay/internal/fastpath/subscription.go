package fastpath

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/entoutbox/entoutbox/metrics"
	"github.com/entoutbox/entoutbox/relay/internal/engine"
)

// rescanEvery is how often a caught-up subscription reads from the oldest
// row. Rows committed late below the cursor are found without it (see
// store.claim); it is a safety net for rows inserted without a transaction
// id, by hand.
const rescanEvery = time.Second

// Subscription is one subscribe call of a fast source. Its run loop owns
// all of its state and does one thing per turn: it starts a claim, a
// recording of acks or a rebalance when one is due (each runs beside the
// loop, one at a time), hands out the next row, or takes the outcome of
// whatever finished. The books
// of rows held are in q, those of partitions in parts.
type Subscription struct {
	s       *Source
	topic   string
	holder  string // its name as a member of the topic's group
	out     chan *fastDelivery
	results chan result // the outcomes of the deliveries in flight
	ctx     context.Context
	done    chan struct{} // closed when run returns

	q     *queues
	parts *partitionSet

	// metrics is the relay's, nil when off or for a Subscriber on its
	// own.
	metrics *metrics.Metrics

	// Sending: the head about to be handed out, and its delivery.
	nextRow *engine.Row
	nextOut *fastDelivery

	// Claiming.
	claims        claimConn // its hold on the claim connections
	claimed       chan claimResult
	claiming      bool
	wantClaim     bool // something may have come: claim when there is room
	claimFailures int  // in a row
	claimPaused   bool // after a failure, until claimRetry fires
	claimRetry    *time.Timer
	cursor        int64 // the next claim reads on from this row id
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
	// rowBytes is the mean size of the rows the last claim read, to read
	// no more rows than the byte budget may take. After a claim cut short
	// by its byte budget (waitRoom), the next waits for bytes to be freed.
	rowBytes  int64
	waitRoom  bool
	waitFreed uint64

	// Recording acks: the acks being recorded, and the outcome. acksSince
	// is when the first ack waiting to be recorded came; recordT fires
	// when they have waited recordDelay.
	recording  []ack
	recordDone chan error
	acksSince  time.Time
	recordT    *time.Timer

	// Blocked aggregates: retry fires when the earliest block ends.
	retry   *time.Timer
	retryAt time.Time

	// Rebalancing.
	rebalanced     chan rebalanceResult
	rebalancing    bool
	rebalanceAgain bool // one was asked for while one ran
	rebalanceT     *time.Timer
	rebalanceEvery time.Duration
	renewed        time.Time // when the last successful rebalance began: the leases run from then
	renewFailing   bool      // set while rebalances fail (the database is away)
	live           *liveness // its lock of life
	dead           deadHolders
	waitingOn      string // who it last said it waits for
	epoch          int    // counts giveUpAll calls

	// sendUntil is when two thirds of the leases renewed last have passed,
	// in Unix nanoseconds, and losses counts the times it lost partitions
	// (gave them up, or found them taken): the relay reads both from its
	// own goroutines before it publishes a message (see MayPublish).
	sendUntil atomic.Int64
	losses    atomic.Int64
}

// result is the outcome of a delivery, taken back to the run loop.
type result struct {
	d *fastDelivery
	outcome
}

// outcome is what became of a delivery.
type outcome struct {
	kind     outcomeKind
	decision engine.Decision // of a failed one
}

type outcomeKind int

const (
	delivered outcomeKind = iota
	// unsent: not published, no fault of the row (see MayPublish); it
	// comes again, with the rest of its aggregate behind it.
	unsent
	// failed: as the decision says, tried again later or dead-lettered.
	failed
)

// newSubscription is a subscription named holder whose out channel has
// room for buffer deliveries: none for a Watermill consumer, which takes
// one message at a time, a little for the relay's engine, so that the loop
// hands out in bursts while the engine publishes. A delivery waiting there
// is in flight; the engine checks MayPublish before it publishes it,
// however long it waited.
func newSubscription(s *Source, topic, holder string, buffer int) *Subscription {
	sub := &Subscription{s: s, topic: topic, holder: holder,
		out: make(chan *fastDelivery, buffer), results: make(chan result, s.cfg.BatchSize), done: make(chan struct{}),
		q:       newQueues(s.countBytes),
		parts:   newPartitionSet(s.cfg.Partitions),
		claimed: make(chan claimResult, 1), wantClaim: true, claimRetry: stoppedTimer(), rescanT: stoppedTimer(),
		retry:      stoppedTimer(),
		rebalanced: make(chan rebalanceResult, 1), rebalanceT: stoppedTimer(), recordT: stoppedTimer(),
		rebalanceEvery: min(time.Second, s.cfg.Lease/3),
	}
	sub.live = s.newLiveness(holder)
	sub.claims = claimConn{pool: s.claims}
	return sub
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

func (sub *Subscription) run(ctx context.Context) {
	s := sub.s
	sub.ctx = ctx
	sub.metrics = s.cfg.Metrics
	defer close(sub.done)
	wake := s.notifier.add()
	defer s.notifier.remove(wake)
	poll := time.NewTicker(s.cfg.PollInterval)
	defer poll.Stop()
	defer func() {
		for _, t := range []*time.Timer{sub.rebalanceT, sub.retry, sub.rescanT, sub.claimRetry, sub.recordT} {
			t.Stop()
		}
	}()
	sub.scheduleRebalance()
	for {
		sub.maybeClaim()
		sub.maybeRecord()
		send, next := sub.toSend()
		select {
		case <-ctx.Done():
			sub.shutdown()
			return
		case <-s.closing:
			sub.shutdown()
			return
		case send <- next:
			sub.sent()
			sub.sendMore()
		case c := <-sub.claimed:
			sub.claimDone(c)
		case res := <-sub.results:
			sub.settled(res)
			sub.settleMore()
		case err := <-sub.recordDone:
			sub.recorded(err)
		case r := <-sub.rebalanced:
			sub.rebalanceDone(r)
		case <-sub.live.lostC():
			sub.lostLiveness()
		case <-sub.retry.C:
			sub.retried()
		case <-sub.rescanT.C:
			sub.rescanArmed, sub.wantClaim = false, true
		case <-sub.recordT.C: // maybeRecord, at the top of the loop, records them
		case <-sub.claimRetry.C:
			sub.claimPaused, sub.wantClaim = false, true
		case <-wake.rows:
			sub.wantClaim = true
		case <-poll.C:
			sub.wantClaim = true
		case <-wake.rebalance:
			sub.startRebalance()
		case <-wake.Missed(): // a notification may have been missed
			sub.wantClaim = true
			sub.startRebalance()
		case <-sub.rebalanceT.C:
			sub.startRebalance()
		}
	}
}

// maybeClaim starts a claim when one is wanted, none runs, and a quarter
// of the batch has room, in rows and in bytes: so a claim is under way
// while the previous one is being published. A row larger than the byte
// bound is claimed only when nothing else is held.
func (sub *Subscription) maybeClaim() {
	cfg := &sub.s.cfg
	room, byteRoom := cfg.BatchSize-sub.q.held(), cfg.MaxBytesInFlight-sub.q.bytes
	if sub.claiming || sub.claimPaused || !sub.wantClaim || room < max(cfg.BatchSize/4, 1) ||
		byteRoom < max(cfg.MaxBytesInFlight/4, 1) || sub.waitRoom && sub.q.freed == sub.waitFreed {
		return
	}
	parts, any := sub.parts.claimable()
	if !any {
		return
	}
	sub.claiming, sub.wantClaim = true, false
	// Claims read on from the cursor, and below it the rows of the
	// transactions that were open when it passed them (see store.claim).
	// Rows held already and aggregates waiting for a retry are left out: a
	// rescan may leave the cursor below rows held.
	now := time.Now()
	q := claimQuery{topic: sub.topic, parts: parts, after: sub.cursor, late: sub.late, limit: room,
		held: sub.q.heldIDs(), blocked: sub.q.stillBlocked(now),
		budget: byteRoom, force: sub.q.bytes == 0, freed: sub.q.freed}
	// PostgreSQL reads every row the claim reads whole, taken or not: read
	// little more than the budget may take.
	if sub.rowBytes > 0 {
		q.limit = int(min(int64(room), byteRoom/sub.rowBytes+2))
	}
	// Read from the oldest row when partitions or blocked aggregates come
	// back and, once caught up, every rescanEvery as a safety net for rows
	// written without a transaction id. Not every claim: while a long
	// transaction elsewhere holds vacuum back, the oldest part of the index
	// is full of delivered rows to step over.
	switch {
	case sub.rescan || sub.cursor == 0 || sub.caughtUp && now.Sub(sub.lastRescan) >= sub.s.rescanInterval():
		q.after, sub.rescan, sub.lastRescan = 0, false, now
	case sub.caughtUp && !sub.rescanArmed:
		sub.rescanArmed = true
		sub.rescanT.Reset(sub.lastRescan.Add(sub.s.rescanInterval()).Sub(now))
	}
	go func() {
		started := time.Now()
		if q.after == 0 && sub.s.store.logged {
			upto, late, err := sub.s.store.floor(sub.ctx)
			if err != nil {
				sub.claimed <- claimResult{err: err, query: q, started: started}
				return
			}
			if upto > 0 {
				q.after, q.late, q.fromFloor = upto, late, true
			}
		}
		got, err := sub.s.store.claim(sub.ctx, &sub.claims, q)
		sub.claimed <- claimResult{rows: got.rows, open: got.open, cut: got.cut, cutSize: got.cutSize, err: err,
			query: q, started: started}
	}()
}

// claimDone takes the outcome of a claim.
func (sub *Subscription) claimDone(c claimResult) {
	s := sub.s
	sub.claiming = false
	if c.err != nil {
		// Wait before the next claim, longer after each failure in a row: a
		// failing claim must not spin, whatever wakes it.
		sub.claimFailures++
		pause := s.cfg.Backoff(sub.claimFailures)
		if sub.ctx.Err() == nil && sub.claimFailures <= 3 {
			s.cfg.Logger.Error("Claiming outbox rows failed; trying again", c.err,
				watermill.LogFields{"retry_in": pause.String(), "failures": sub.claimFailures})
		}
		sub.claimPaused = true
		sub.claimRetry.Reset(pause)
		return
	}
	sub.metrics.Claimed(len(c.rows), time.Since(c.started))
	if sub.claimFailures > 0 {
		s.cfg.Logger.Info("Claiming outbox rows works again", watermill.LogFields{"failures": sub.claimFailures})
		sub.claimFailures = 0
	}
	fromStart := c.query.after == 0 || c.query.fromFloor
	sub.add(c.rows, fromStart, c.started)
	if n := int64(len(c.rows)); n > 0 || c.cut {
		total := c.cutSize
		for _, r := range c.rows {
			total += r.Size
		}
		if c.cut {
			n++
		}
		sub.rowBytes = total / n
	}
	// Cut short by its byte budget: claim again once bytes held were
	// freed, not before (it would stop at the same row).
	sub.waitRoom, sub.waitFreed = c.cut, c.query.freed
	// A full claim means more rows wait: go on from the last one (a full
	// rescan goes back to it). Otherwise go on from the newest row seen.
	full := len(c.rows) == c.query.limit || c.cut
	sub.wantClaim = sub.wantClaim || full // keep a wake-up that came during the claim
	sub.caughtUp = !full
	if n := len(c.rows); n > 0 && (c.rows[n-1].ID > sub.cursor || full && fromStart) {
		sub.cursor = c.rows[n-1].ID
	}
	// Read whole from the floor: nothing it saw waits under it.
	if c.query.fromFloor && !full && c.query.after > sub.cursor {
		sub.cursor = c.query.after
	}
	// Rows the claim could not see yet, below the new cursor, belong to the
	// transactions open in its snapshot: the next claims read theirs. The
	// earlier late transactions' rows were read by this claim (they come
	// first, being below the cursor) unless they alone filled it.
	below := 0
	for _, r := range c.rows {
		if r.ID <= c.query.after {
			below++
		}
	}
	if full && below == len(c.rows) {
		sub.late = sub.late.merge(c.open)
	} else {
		sub.late = c.open
	}
}

// add queues claimed rows. fromStart tells the claim read from the oldest
// row, started when it began: only such a claim, begun after a block
// ended, may unblock an aggregate.
func (sub *Subscription) add(rows []*engine.Row, fromStart bool, started time.Time) {
	now := time.Now()
	for _, r := range rows {
		if !sub.parts.keeps(r.Partition) {
			continue // given up while the claim ran
		}
		a := r.Aggregate()
		if !sub.q.unblock(a, fromStart, started) {
			continue
		}
		if r.Wait > 0 {
			sub.block(a, r.Partition, now.Add(r.Wait))
			continue
		}
		if err := r.Check(); err != nil {
			// No broker can take it: set it aside, now. The rest of its
			// aggregate goes on.
			d := engine.Malformed(err.Error(), r.Attempts)
			if err := sub.s.store.deadLetter(context.Background(), r, d.Reason, d.Attempts); err != nil {
				sub.s.cfg.Logger.Error("Setting a broken row aside failed", err,
					watermill.LogFields{"event_id": r.EventID.String(), "relay": sub.holder})
				sub.block(a, r.Partition, now.Add(sub.s.cfg.Backoff(1)))
			} else {
				engine.DeadLettered(sub.metrics, sub.s.cfg.Logger, pathName, sub.holder, r, d)
			}
			continue
		}
		sub.q.push(r)
	}
}

// Acks are recorded in batches: a statement costs PostgreSQL many times
// what one more row in it does (an UPDATE of 20 rows about 40 µs a row, of
// 500 about 11). So acks wait for a quarter of the batch, or recordDelay
// after the first of them, unless nothing else is in flight or a
// partition waits to be given back. The wait costs no latency (the next
// row of an aggregate goes once its predecessor is acked, recorded or
// not), only rows held a little longer.
const recordDelay = 20 * time.Millisecond

// maybeRecord starts recording the acks received, when no recording runs
// and enough of them wait.
func (sub *Subscription) maybeRecord() {
	if sub.recordDone != nil || len(sub.q.acks) == 0 {
		return
	}
	if len(sub.q.acks) < max(sub.s.cfg.BatchSize/4, 1) && len(sub.q.inflight) > 0 && len(sub.parts.releasing) == 0 {
		now := time.Now()
		if sub.acksSince.IsZero() {
			sub.acksSince = now
			sub.recordT.Reset(recordDelay)
			return
		}
		if now.Sub(sub.acksSince) < recordDelay {
			return
		}
	}
	sub.acksSince = time.Time{}
	sub.recordT.Stop()
	sub.recording = sub.q.takeAcks()
	sub.recordDone = make(chan error, 1)
	ids := ackIDs(sub.recording)
	go func() { sub.recordDone <- sub.s.store.delivered(context.WithoutCancel(sub.ctx), ids) }()
}

// recorded takes the outcome of recording acks.
func (sub *Subscription) recorded(err error) {
	sub.finishRecording(err)
	sub.wantClaim = true // rows behind the acked ones may now be claimed
	if len(sub.parts.drainedReleasing(sub.q)) > 0 {
		sub.startRebalance() // give it back now: another relay waits for it
	}
}

func (sub *Subscription) finishRecording(err error) {
	if err != nil {
		sub.s.cfg.Logger.Error("Recording delivered rows failed; they will be delivered again", err, nil)
	}
	sub.q.recorded(sub.recording)
	sub.recording, sub.recordDone = nil, nil
}

// toSend is the channel and delivery to hand out next: a nil channel when
// nothing may be handed out now.
func (sub *Subscription) toSend() (chan *fastDelivery, *fastDelivery) {
	head := sub.q.head()
	if head == nil || !sub.maySend() {
		return nil, nil
	}
	if head != sub.nextRow {
		sub.nextRow, sub.nextOut = head, &fastDelivery{sub: sub, r: head, msg: head.Message(sub.s.cfg.Attributes)}
	}
	// What the engine checks before it publishes it, as of now.
	sub.nextOut.live, sub.nextOut.losses = sub.live, sub.losses.Load()
	return sub.out, sub.nextOut
}

// renewedAt records that the leases were renewed at t.
func (sub *Subscription) renewedAt(t time.Time) {
	sub.renewed = t
	sub.sendUntil.Store(t.Add(sub.s.cfg.Lease * 2 / 3).UnixNano())
}

// maySend tells whether the subscription may send rows now: it holds its
// liveness lock and its leases were renewed within two thirds of their
// length. Checked before every send, so that a relay that was paused or
// stalled sends nothing once it may have lost its partitions.
func (sub *Subscription) maySend() bool {
	return sub.live.ok() && time.Since(sub.renewed) < sub.s.cfg.Lease*2/3
}

// sent takes the head the receiver of out took: it is in flight until its
// outcome comes back (see fastDelivery).
func (sub *Subscription) sent() {
	sub.q.send()
	sub.nextRow, sub.nextOut = nil, nil
}

// Next is the next delivery the subscription hands out, for the engine:
// false once it ended, or ctx did.
func (sub *Subscription) Next(ctx context.Context) (engine.Delivery, bool) {
	select {
	case d, ok := <-sub.out:
		if !ok {
			return nil, false
		}
		return d, true
	case <-ctx.Done():
		return nil, false
	}
}

// Done is closed once the subscription ended: it handed its rows back.
func (sub *Subscription) Done() <-chan struct{} { return sub.done }

// burst bounds the messages sent, or the outcomes taken, in one turn of
// the loop: a turn of the whole select per message would cost more than
// the message, but the loop must still see to its other work.
const burst = 64

// sendMore sends on while the consumer takes messages at once.
func (sub *Subscription) sendMore() {
	for range burst {
		send, next := sub.toSend()
		if send == nil {
			return
		}
		select {
		case send <- next:
			sub.sent()
		default:
			return
		}
	}
}

// settleMore takes the outcomes that have come meanwhile.
func (sub *Subscription) settleMore() {
	for range burst {
		select {
		case res := <-sub.results:
			sub.settled(res)
		default:
			return
		}
	}
}

// fastDelivery is a row a subscription handed out, and the way its
// outcome goes back to the run loop (through results). Exactly one outcome
// counts: the first.
type fastDelivery struct {
	sub     *Subscription
	r       *engine.Row
	msg     *message.Message
	settled atomic.Bool
	// live and losses are the subscription's when it handed the row out.
	live   *liveness
	losses int64
}

func (d *fastDelivery) Row() *engine.Row          { return d.r }
func (d *fastDelivery) Message() *message.Message { return d.msg }

// MayPublish tells whether the row may still be published, a while after
// the subscription handed it out: it may have waited for a publish slot
// for long, while the subscription lost its liveness lock, went two thirds
// into its leases without renewing them, or lost partitions. The engine
// checks it right before the broker is called, as maySend is checked
// before the subscription hands a row out.
func (d *fastDelivery) MayPublish() bool {
	return d.live.ok() && time.Now().UnixNano() < d.sub.sendUntil.Load() && d.sub.losses.Load() == d.losses
}

func (d *fastDelivery) Delivered()               { d.settle(outcome{kind: delivered}) }
func (d *fastDelivery) Unsent()                  { d.settle(outcome{kind: unsent}) }
func (d *fastDelivery) Failed(f engine.Decision) { d.settle(outcome{kind: failed, decision: f}) }

// settle takes outcome o back to the run loop, unless one was taken
// already or the subscription is over (the partition is given up and the
// row will come again).
func (d *fastDelivery) settle(o outcome) {
	if !d.settled.CompareAndSwap(false, true) {
		return
	}
	select {
	case d.sub.results <- result{d: d, outcome: o}:
	case <-d.sub.done:
	}
}

// settled takes the outcome of a delivery in flight.
func (sub *Subscription) settled(res result) {
	r := res.d.r
	switch res.kind {
	case unsent:
		// Not published, and no fault of the row: nothing to record.
		sub.q.settle(r, false)
		sub.block(r.Aggregate(), r.Partition, time.Now())
		return
	case failed:
		if sub.recordDone != nil {
			// Record the acks before the failure: nothing acked comes again.
			sub.finishRecording(<-sub.recordDone)
		}
		sub.q.settle(r, false)
		if !sub.failed(r, res.decision) {
			return // its aggregate waits for the retry
		}
	default:
		sub.q.settle(r, true)
	}
	sub.q.goOn(r.Aggregate())
}

// failed carries out the failure policy's decision d on r: a retry later,
// or the dead letters. It reports whether the aggregate goes on at once
// (the row is set aside) rather than waiting for the retry.
func (sub *Subscription) failed(r *engine.Row, d engine.Decision) bool {
	s := sub.s
	if d.DeadLetter {
		err := s.store.deadLetter(sub.ctx, r, d.Reason, d.Attempts)
		if err == nil {
			engine.DeadLettered(sub.metrics, s.cfg.Logger, pathName, sub.holder, r, d)
			return true
		}
		s.cfg.Logger.Error("Moving a failed row to the dead letters failed; it will be tried again", err,
			watermill.LogFields{"event_id": r.EventID})
		sub.block(r.Aggregate(), r.Partition, time.Now().Add(s.cfg.Backoff(d.Attempts)))
		return false
	}
	if err := s.store.failed(sub.ctx, r, d); err != nil {
		s.cfg.Logger.Error("Recording a failed delivery failed", err, watermill.LogFields{"event_id": r.EventID})
	}
	sub.block(r.Aggregate(), r.Partition, time.Now().Add(d.Wait))
	return false
}

// block holds back aggregate a until the retry of its oldest row.
func (sub *Subscription) block(a engine.Aggregate, partition int, until time.Time) {
	sub.q.block(a, partition, until)
	if sub.retryAt.IsZero() || until.Before(sub.retryAt) {
		sub.retryAt = until
		sub.retry.Reset(time.Until(until))
	}
}

// retried runs when the earliest block ends: the next claim reads from the
// oldest row, which unblocks the aggregates whose time has come.
func (sub *Subscription) retried() {
	sub.rescan, sub.wantClaim = true, true
	sub.retryAt = sub.q.nextRetry(time.Now())
	if !sub.retryAt.IsZero() {
		sub.retry.Reset(time.Until(sub.retryAt))
	}
}

// shutdown records the acks already received, waits up to CloseTimeout for
// the deliveries in flight, and gives every partition back.
func (sub *Subscription) shutdown() {
	close(sub.out) // nothing more is handed out
	// Nothing takes from out any more: what waits there comes again.
	for d := range sub.out {
		if d.settled.CompareAndSwap(false, true) {
			sub.q.settle(d.r, false)
		}
	}
	// A rebalance under way must not take partitions back after they are
	// given back.
	if sub.rebalancing {
		<-sub.rebalanced
		sub.rebalancing = false
	}
	if sub.claiming {
		sub.claimDone(<-sub.claimed)
	}
	// Deliveries in flight may still be delivered; the others come again.
	deadline := time.NewTimer(sub.s.cfg.CloseTimeout)
	defer deadline.Stop()
wait:
	for len(sub.q.inflight) > 0 {
		select {
		case res := <-sub.results:
			sub.q.settle(res.d.r, res.kind == delivered)
		case <-deadline.C:
			break wait
		}
	}
	ctx := context.Background()
	if sub.recordDone != nil {
		sub.finishRecording(<-sub.recordDone)
	}
	if acks := sub.q.takeAcks(); len(acks) > 0 {
		if err := sub.s.store.delivered(ctx, ackIDs(acks)); err != nil {
			sub.s.cfg.Logger.Error("Recording delivered rows failed; they will be delivered again", err, nil)
		}
	}
	if err := sub.s.store.leave(ctx, sub.topic, sub.holder); err != nil {
		sub.s.cfg.Logger.Error("Giving the partitions back failed; they will be free when their lease ends", err, nil)
	}
	sub.live.release()
	sub.claims.reset()
}
