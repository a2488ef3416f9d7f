// Package pollpath is the relay's read path on SQLite and MySQL: it polls
// the undelivered rows in id order and hands the engine, for each
// aggregate, its oldest row, and the next one only once that one is
// settled. Neither has LISTEN; SQLite has no row locks and lets one
// transaction write at a time. One relay runs at a time, holding the
// outbox's lease; the others wait to take over.
//
// On MySQL ids are taken when rows are written, not when they commit: a
// row may commit after a later id was read. The scan starts again from
// the first undelivered row at each pass, so such a row is read at the
// next pass; an aggregate's rows are written one transaction at a time
// (its counter's row lock), so its ids follow its order all the same.
//
// On MySQL several relays share the outbox: the rows are divided into
// partitions by their aggregate, and each relay leases its share of them
// (partitions.go); on SQLite one relay holds the whole outbox's lease
// (lease.go).
package pollpath

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/metrics"
	"github.com/entoutbox/entoutbox/relay/internal/engine"
)

// Settings is what the poll path takes of the relay's settings.
type Settings struct {
	DB           *sql.DB
	Tables       outboxdb.Tables // in the SQLite or MySQL dialect
	BatchSize    int
	PollInterval time.Duration
	Delete       bool // delete delivered rows rather than mark them
	CloseTimeout time.Duration
	Attributes   engine.Attributes
	Logger       watermill.LoggerAdapter
	Metrics      *metrics.Metrics
	RelayID      string // holds the lease while it relays
	// Partitions divide the rows between the relays on MySQL; zero or
	// one, one relay holds the whole outbox (SQLite).
	Partitions int
}

// Policy is the poll path's failure policy: maxAttempts failed publishes,
// backoff between them.
func Policy(maxAttempts int, backoff func(attempt int) time.Duration) engine.Policy {
	return engine.Policy{MaxAttempts: maxAttempts, Backoff: backoff}
}

// Source is the poll path.
type Source struct {
	cfg Settings
	db  outboxdb.SQLQuerier // cfg.DB, binding the statements' parameters

	mu sync.Mutex
	// out holds the aggregates with a row handed out and not yet settled.
	out map[engine.Aggregate]bool
	// settled is signalled when a row is settled: its aggregate may go on.
	settled chan struct{}
	// inFlight counts the rows handed out and not yet settled.
	inFlight sync.WaitGroup
	// recent holds the rows settled lately, by the count of settles
	// when each was: a read begun before a row's settle was recorded may
	// still return it undelivered, and must not hand it out again.
	recent  map[int64]uint64
	settles uint64

	// The scan: rows are read in id order after cursor, a page at a time,
	// and a pass ends when a page comes back short. An aggregate met in a
	// pass and not handed out (its row out, or waiting for a retry) is
	// passed over for the rest of the pass, so that none of its later rows
	// goes before it.
	cursor  int64
	skipped map[engine.Aggregate]bool
	// A pass that met no row it did not know (all of the backlog it may
	// take is out or behind already) makes the next read wait until
	// quietUntil: twice as long as the pass took, up to a poll interval.
	// The rows behind then go out between reads, not after a read of the
	// whole backlog at every settle (which held a hot aggregate to one
	// event per read); a short pass still lets the next read come at the
	// next settle, so that a busy relay finds a commit sooner than an idle
	// one. fresh counts the pass's new rows, passTook its reads' time.
	fresh      int
	passTook   time.Duration
	quietUntil time.Time
	ready      []*engine.Row
	// The rows read behind an aggregate's row that is out or ready, in id
	// order, up to BatchSize in all: when that row is settled the next
	// goes out without a read (a hot aggregate would otherwise cost a
	// scan of the whole backlog per event). known holds the ids of the
	// rows ready, behind or out, so that a read does not take them twice.
	behind   map[engine.Aggregate][]*engine.Row
	buffered int
	waiting  map[engine.Aggregate]bool // a row of it is ready
	known    map[int64]bool
	sqlDone  string
	sqlFail  string
	// acks are the rows delivered and not yet recorded: one write records
	// those that came while the previous one ran (SQLite commits one
	// write at a time, each with its sync), then settles them.
	acksMu  sync.Mutex
	acks    []*engine.Row
	ackKick chan struct{}
	// lease is what the relay holds of the outbox, and clock until when
	// it certainly runs.
	lease leaser
	clock *leaseClock
	// stopped ends when the relay stops: a write that settles a row is
	// tried again until it works or then.
	stopped context.Context
}

// New is the poll path on cfg's database.
func New(cfg Settings) *Source {
	done := outboxdb.PollDelivered
	if cfg.Delete {
		done = outboxdb.PollDeliveredDelete
	}
	db := outboxdb.BoundSQL(cfg.DB, cfg.Tables.Dialect)
	clock := &leaseClock{}
	var lease leaser = &wholeLease{db: db, tables: cfg.Tables, relay: cfg.RelayID, clock: clock}
	if cfg.Partitions > 1 {
		lease = &partitionLeases{db: cfg.DB, bound: db, tables: cfg.Tables, relay: cfg.RelayID, total: cfg.Partitions, clock: clock}
	}
	return &Source{cfg: cfg, db: db, out: map[engine.Aggregate]bool{}, settled: make(chan struct{}, 1), recent: map[int64]uint64{},
		ackKick: make(chan struct{}, 1), behind: map[engine.Aggregate][]*engine.Row{}, waiting: map[engine.Aggregate]bool{},
		known: map[int64]bool{}, skipped: map[engine.Aggregate]bool{}, lease: lease, clock: clock,
		sqlDone: done.SQL(cfg.Tables), sqlFail: outboxdb.PollFailed.SQL(cfg.Tables)}
}

// Run relays until ctx ends, then waits for the publishes in flight (up
// to CloseTimeout). It relays only what it holds the lease of: the whole
// outbox, another relay holding it, it waits, and takes over when that
// one stops or its lease runs out (a killed relay's, within leaseFor);
// or its share of the partitions.
func (s *Source) Run(ctx context.Context, e *engine.Engine) error {
	s.stopped = ctx
	if err := s.lease.create(ctx); err != nil {
		return err
	}
	defer s.lease.release(context.WithoutCancel(ctx)) // a stopping relay hands over at once, its last acks recorded (below)
	// The acks are recorded until the relay has waited for the last
	// publishes: flushing stops after the loop below, before the release.
	flushing, stopFlushing := context.WithCancel(context.WithoutCancel(ctx))
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		s.flushAcks(flushing)
	}()
	defer func() { stopFlushing(); <-flushed }()
	for {
		if !s.awaitLease(ctx) {
			return nil
		}
		s.cfg.Logger.Info("Relay running", s.logFields(map[string]any{"path": "poll", "table": s.cfg.Tables.Outbox}))
		term, ended := context.WithCancel(ctx)
		go s.keepLease(term, ended)
		e.Run(term, s.next)
		ended()
		settled := engine.AwaitPublishes(&s.inFlight, s.cfg.CloseTimeout, s.cfg.Logger)
		if settled && ctx.Err() == nil { // nothing of it in flight, every ack recorded: what is given back is whole
			if err := s.lease.handBack(ctx); err != nil {
				s.cfg.Logger.Error("Giving partitions back failed; their leases will run out", err, nil)
			}
		}
		s.reset()
		if ctx.Err() != nil {
			return nil
		}
		s.cfg.Logger.Info("The relay's lease changed (another relay took it, or it gives partitions back); going on with what it holds",
			map[string]any{"relay": s.cfg.RelayID})
	}
}

// logFields is fields, with the relay and what it holds.
func (s *Source) logFields(fields map[string]any) map[string]any {
	fields["relay"] = s.cfg.RelayID
	for k, v := range s.lease.describe() {
		fields[k] = v
	}
	return fields
}

// awaitLease takes the lease (or partitions), waiting while other relays
// hold it all; false when ctx ended first.
func (s *Source) awaitLease(ctx context.Context) bool {
	said := false
	for {
		held, err := s.lease.acquire(ctx)
		switch {
		case held:
			return true
		case err != nil && ctx.Err() == nil:
			s.cfg.Logger.Error("Taking the lease of the outbox failed; trying again", err, nil)
		case err == nil && !said:
			s.cfg.Logger.Info("Other relays hold the outbox's lease; waiting to take over", s.logFields(map[string]any{}))
			said = true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(leaseRetry):
		}
	}
}

// keepLease renews the lease until term ends, and ends it when a renewal
// finds it lost, or some of it to give back.
func (s *Source) keepLease(term context.Context, end context.CancelFunc) {
	t := time.NewTicker(leaseRenew)
	defer t.Stop()
	for {
		select {
		case <-term.Done():
			return
		case <-t.C:
		}
		keep, err := s.lease.renew(term)
		if err == nil && !keep || err != nil && !s.clock.runs() {
			end() // another relay's now, or it may be; or the surplus goes back
			return
		}
	}
}

// flushAcks records the queued acks, each batch in one write, until ctx
// ends; then the last ones.
func (s *Source) flushAcks(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			s.flushAcksOnce()
			return
		case <-s.ackKick:
			s.flushAcksOnce()
		}
	}
}

// maxAcks bounds the ids of one write.
const maxAcks = 1000

func (s *Source) flushAcksOnce() {
	s.acksMu.Lock()
	rows := s.acks
	s.acks = nil
	s.acksMu.Unlock()
	for len(rows) > 0 {
		batch := rows[:min(len(rows), maxAcks)]
		rows = rows[len(batch):]
		ids := make([]int64, len(batch))
		for i, r := range batch {
			ids[i] = r.ID
		}
		list, _ := json.Marshal(ids) // ints encode
		s.record(s.stopped, "deliveries", func(ctx context.Context) error {
			_, err := s.db.ExecContext(ctx, s.sqlDone, string(list))
			return err
		})
		for _, r := range batch {
			s.forget(r) // released when the broker took it
		}
	}
}

// reset forgets the scan of a term that ended: the next reads afresh.
func (s *Source) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cursor, s.ready, s.buffered, s.fresh, s.passTook, s.quietUntil = 0, nil, 0, 0, 0, time.Time{}
	clear(s.skipped)
	clear(s.out)
	clear(s.behind)
	clear(s.waiting)
	clear(s.known)
}

// next is the next row whose turn came, for the engine; false once ctx
// ends.
func (s *Source) next(ctx context.Context) (engine.Delivery, bool) {
	for {
		if !s.clock.runs() { // a renewal stalls: nothing would be published, so nothing is read
			select {
			case <-ctx.Done():
				return nil, false
			case <-time.After(leaseRetry):
			}
			continue
		}
		r, err := s.nextRow(ctx)
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Error("Reading the outbox failed; trying again", err, nil)
		}
		if r != nil {
			return &delivery{s: s, r: r, msg: r.Message(s.cfg.Attributes), term: ctx}, true
		}
		wait := time.NewTimer(s.untilRead())
		select {
		case <-ctx.Done():
			wait.Stop()
			return nil, false
		case <-s.settled:
		case <-wait.C:
		}
		wait.Stop()
	}
}

// untilRead is how long an idle relay waits before it reads again: the
// poll interval, or less when a quiet pass ends sooner.
func (s *Source) untilRead() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := time.Until(s.quietUntil); q > 0 && q < s.cfg.PollInterval {
		return q
	}
	return s.cfg.PollInterval
}

// nextRow is the next row to hand out, or nil when a whole pass found
// none (the caller then waits for a settled row or the poll interval).
func (s *Source) nextRow(ctx context.Context) (*engine.Row, error) {
	for {
		if r := s.takeReady(ctx); r != nil {
			return r, nil
		}
		s.mu.Lock()
		before, full := s.settles, s.buffered >= s.cfg.BatchSize/2
		s.mu.Unlock()
		if full || time.Now().Before(s.quietUntil) { // what is read waits already: read again once half of it went out
			return nil, nil
		}
		began := time.Now()
		rows, err := s.read(ctx)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.passTook += time.Since(began)
		for id, at := range s.recent {
			if at <= before { // recorded before the read began: it cannot have returned it
				delete(s.recent, id)
			}
		}
		for _, r := range rows {
			s.cursor = r.ID
			if _, settled := s.recent[r.ID]; settled || s.known[r.ID] {
				continue
			}
			s.fresh++
			s.place(r)
		}
		endOfPass := len(rows) < s.cfg.BatchSize
		if endOfPass {
			if s.fresh == 0 {
				s.quietUntil = time.Now().Add(min(2*s.passTook, s.cfg.PollInterval))
			}
			s.cursor, s.fresh, s.passTook = 0, 0, 0
			clear(s.skipped)
		}
		found := len(s.ready) > 0
		s.mu.Unlock()
		if !found && endOfPass {
			return nil, nil
		}
	}
}

// place puts r, an undelivered row just read, where it belongs: ready
// when its aggregate has nothing out or ready, behind the aggregate's
// rows when it has (while the buffer has room), else passed over for the
// rest of the pass, as the aggregate's later rows then are too.
func (s *Source) place(r *engine.Row) {
	a := r.Aggregate()
	switch {
	case r.Wait > 0 || s.skipped[a]:
		s.skipped[a] = true
	case s.out[a] || s.waiting[a]:
		if s.buffered >= s.cfg.BatchSize {
			s.skipped[a] = true
			return
		}
		s.behind[a] = append(s.behind[a], r)
		s.buffered++
		s.known[r.ID] = true
	default:
		s.ready = append(s.ready, r)
		s.waiting[a] = true
		s.known[r.ID] = true
	}
}

// takeReady hands out the first ready row, dead-lettering malformed ones
// on the way.
func (s *Source) takeReady(ctx context.Context) *engine.Row {
	for {
		s.mu.Lock()
		if len(s.ready) == 0 {
			s.mu.Unlock()
			return nil
		}
		r := s.ready[0]
		s.ready = s.ready[1:]
		s.out[r.Aggregate()] = true
		delete(s.waiting, r.Aggregate())
		s.inFlight.Add(1)
		s.mu.Unlock()
		if err := r.Check(); err != nil {
			s.deadLetter(ctx, r, engine.Malformed(err.Error(), r.Attempts))
			s.settle(r, true)
			continue
		}
		return r
	}
}

// read reads the next page of undelivered rows.
func (s *Source) read(ctx context.Context) ([]*engine.Row, error) {
	s.mu.Lock()
	cursor := s.cursor
	s.mu.Unlock()
	stmt, filter := s.lease.filter()
	rs, err := s.db.QueryContext(ctx, stmt.SQL(s.cfg.Tables), append([]any{cursor, s.cfg.BatchSize}, filter...)...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var rows []*engine.Row
	for rs.Next() {
		r := &engine.Row{}
		var waitMS int64
		if err := rs.Scan(&r.ID, &r.EventID, &r.Name, &r.Version, &r.Topic, &r.AggregateType, &r.AggregateID,
			&r.Payload, &r.Headers, &r.ReadableFrom, &r.AggregateSeq, &r.CreatedAt, &r.Attempts, &waitMS); err != nil {
			return nil, err
		}
		r.Wait = time.Duration(waitMS) * time.Millisecond
		r.Size = int64(len(r.Payload) + len(r.Headers))
		rows = append(rows, r)
	}
	return rows, rs.Err()
}

// settle ends r's turn once what became of it is recorded: release, then
// forget.
func (s *Source) settle(r *engine.Row, next bool) {
	s.release(r, next)
	s.forget(r)
}

// release lets r's aggregate go on. With next, r is done (the broker took
// it, or it is in the dead letters) and the aggregate's next row may go
// out: its order at the broker needs no more. Without, r comes again (a
// retry after its wait, or unsent) and nothing of its aggregate goes
// before it.
func (s *Source) release(r *engine.Row, next bool) {
	a := r.Aggregate()
	s.mu.Lock()
	delete(s.out, a)
	q := s.behind[a]
	switch {
	case len(q) > 0 && next: // the aggregate goes on with the next row read
		s.ready = append(s.ready, q[0])
		s.waiting[a] = true
		s.behind[a] = q[1:]
		s.buffered--
	case !next: // the rows behind it, and those the pass has yet to read, wait for it
		for _, b := range q {
			delete(s.known, b.ID)
		}
		s.buffered -= len(q)
		s.behind[a] = nil
		s.skipped[a] = true
	}
	if len(s.behind[a]) == 0 {
		delete(s.behind, a)
	}
	s.mu.Unlock()
	select {
	case s.settled <- struct{}{}:
	default:
	}
}

// forget ends r's turn once the database records it (delivered, moved,
// or its retry): a read may then take it again only if it began before
// (recent).
func (s *Source) forget(r *engine.Row) {
	s.mu.Lock()
	delete(s.known, r.ID)
	s.settles++
	s.recent[r.ID] = s.settles
	s.mu.Unlock()
	s.inFlight.Done()
}

// record runs a write that settles r, again until it works or the relay
// stops: an aggregate goes on only once its row is recorded.
func (s *Source) record(ctx context.Context, what string, write func(context.Context) error) {
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		err := write(context.WithoutCancel(ctx))
		if err == nil {
			return
		}
		s.cfg.Logger.Error("Recording "+what+" failed; trying again", err, nil)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// deadLetter moves r to the dead letters as dec says.
func (s *Source) deadLetter(ctx context.Context, r *engine.Row, dec engine.Decision) {
	s.record(ctx, "a dead letter", func(ctx context.Context) error {
		moved, err := s.cfg.Tables.MoveToDeadLetters(ctx, s.cfg.DB, r.ID, dec.Reason, dec.Attempts)
		if err == nil && !moved {
			return errors.New("the row is no longer in the outbox")
		}
		return err
	})
	engine.DeadLettered(s.cfg.Metrics, s.cfg.Logger, "poll", s.cfg.RelayID, r, dec)
}

// delivery is a row handed to the engine.
type delivery struct {
	s    *Source
	r    *engine.Row
	msg  *message.Message
	term context.Context // the lease's term it was handed out in
}

func (d *delivery) Row() *engine.Row          { return d.r }
func (d *delivery) Message() *message.Message { return d.msg }

// MayPublish is true while the relay holds the lease it was handed out
// under: a relay that lost it, or cannot tell it still holds it,
// publishes no more.
func (d *delivery) MayPublish() bool { return d.term.Err() == nil && d.s.clock.runs() }

// Delivered lets the row's aggregate go on, and queues its ack: the acks
// flusher records it with the others that came meanwhile, in one write.
// Until then the row stays known (no read takes it again); after a
// crash, it and those of its aggregate published after it go again, in
// their order.
func (d *delivery) Delivered() {
	d.s.release(d.r, true)
	d.s.acksMu.Lock()
	d.s.acks = append(d.s.acks, d.r)
	d.s.acksMu.Unlock()
	select {
	case d.s.ackKick <- struct{}{}:
	default:
	}
}

func (d *delivery) Unsent() { d.s.settle(d.r, false) }

// Failed carries out the failure policy's decision: a retry after its
// wait, recorded on the row, or the dead letters.
func (d *delivery) Failed(dec engine.Decision) {
	ctx := d.s.stopped
	if dec.DeadLetter {
		d.s.deadLetter(ctx, d.r, dec)
	} else {
		d.s.record(ctx, "a failed publish", func(ctx context.Context) error {
			_, err := d.s.db.ExecContext(ctx, d.s.sqlFail, d.r.ID, dec.Attempts, dec.Wait.Milliseconds(), dec.Reason)
			return err
		})
	}
	d.s.settle(d.r, dec.DeadLetter)
}
