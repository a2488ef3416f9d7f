package fastpath

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/internal/connerr"
	"github.com/entoutbox/entoutbox/metrics"
	"github.com/entoutbox/entoutbox/relay/internal/engine"
)

// Source is the fast read path: it claims rows in batches, hands out
// many at once but at most one per aggregate at a time (the next one after
// the previous is settled), wakes up on LISTEN/NOTIFY with polling as the
// fallback, and records deliveries in batches. Several sources, in one
// process or many, share a table: each subscription owns a fair share of
// its topic's partitions (see store).
//
// What it hands out are fastDeliveries, each settled once: delivered,
// unsent, or failed with the failure policy's decision. The relay's engine
// publishes them; the relay's public Subscriber hands them to a Watermill
// consumer.
type Source struct {
	cfg        Settings
	store      *store
	notifier   *notifier
	live       *liveSession // holds the liveness locks of all its subscriptions
	claims     *claimPool   // the connections its claims run on, shared by the process
	stopClaims func()

	mu       sync.Mutex
	closed   bool
	closing  chan struct{}
	wg       sync.WaitGroup
	stopNote func() // lets go of its share of the LISTEN connection
	seq      int    // numbers the subscriptions: each owns partitions under its own name
	compacts bool   // its loop moving the delivered log's floor runs
	instance string // random, tells this source from any other with its RelayID
	// bytesHeld is what its subscriptions hold as MaxBytesInFlight counts
	// it, and bytesPeak the most they held at once.
	bytesHeld, bytesPeak atomic.Int64
	// states is what each subscription last published, for Status.
	states subscriberStates
	// Hooks is zero outside the relay's tests; set it before Subscribe.
	Hooks Hooks
}

// Settings is what the fast source takes of the relay's or the
// Subscriber's settings, checked and with the defaults filled in.
type Settings struct {
	Table, DeadLetterTable string
	// RelayID names the source's subscriptions in the partition table.
	RelayID          string
	BatchSize        int
	MaxBytesInFlight int64
	Lease            time.Duration
	Partitions       int
	PollInterval     time.Duration
	// PollOnly turns off what needs a session of its own: the liveness
	// lock and the claim's session setting.
	PollOnly bool
	// ListenDB is the database to LISTEN on; nil for none (it polls).
	ListenDB *sql.DB
	// Delete removes delivered rows instead of marking them delivered_at.
	Delete bool
	// DeliveredLog records deliveries in the delivered log instead of
	// stamping the rows (see outboxdb.FastLogSQL); a table with a log
	// keeps it whatever this says.
	DeliveredLog bool
	// MaxAttempts and Backoff are its failure policy's (see Policy).
	// Backoff also spaces the tries of what failed in the database.
	MaxAttempts  int
	Backoff      func(attempt int) time.Duration
	CloseTimeout time.Duration
	Logger       watermill.LoggerAdapter
	Attributes   engine.Attributes // what the CloudEvents setting adds to every message
	// Metrics is the relay's (nil when off); a Subscriber on its own
	// reports nothing.
	Metrics *metrics.Metrics
}

// pathName is the fast path's name in the logs (the relay's PathFast).
const pathName = "fast"

// rescanInterval is how often a caught-up subscription rescans.
func (s *Source) rescanInterval() time.Duration {
	if s.Hooks.RescanEvery > 0 {
		return s.Hooks.RescanEvery
	}
	return rescanEvery
}

// newLiveness is the lock of life of the subscription named holder, on
// the session all s's subscriptions share.
func (s *Source) newLiveness(holder string) *liveness { return s.live.forHolder(holder) }

// New returns a fast source on db (the pgx database/sql driver).
func New(db *sql.DB, cfg Settings) *Source {
	s := &Source{cfg: cfg, store: newStore(db, cfg), closing: make(chan struct{}), instance: uuid.NewString()[:8]}
	s.store.hooks = &s.Hooks
	s.live = newLiveSession(db, cfg.Table, cfg.PollOnly, &s.Hooks)
	s.claims, s.stopClaims = shareClaimPool(db, cfg.PollOnly)
	if cfg.ListenDB != nil {
		s.notifier, s.stopNote = shareListener(db, cfg.ListenDB, cfg.Table, cfg.Logger, cfg.PollInterval)
	} else {
		s.notifier = pollingNotifier() // never woken: it polls
	}
	return s
}

// Policy is the source's failure policy: its outages back off by the
// row's attempts (it writes the retry in the row, with no count of
// outages).
func (s *Source) Policy() engine.Policy {
	return engine.Policy{MaxAttempts: s.cfg.MaxAttempts, Backoff: s.cfg.Backoff}
}

// Subscribe starts reading the rows of topic ("" for every topic). The
// subscription hands them out (Next) through a channel of room buffer,
// which closes when ctx ends or the source is closed.
func (s *Source) Subscribe(ctx context.Context, topic string, buffer int) (*Subscription, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("relay: subscriber is closed")
	}
	// Before anything is created after the table's name.
	if err := s.store.check(ctx); err != nil {
		return nil, err
	}
	seq := s.nextSeqLocked()
	// The holder name is new for every source, even under a fixed
	// RelayID: a restarted relay must not take for its own the partitions
	// its previous life may still be delivering (they come back when their
	// lease ends), nor may two relays given one RelayID share them.
	sub := newSubscription(s, topic, fmt.Sprintf("%s/%s/%d", s.cfg.RelayID, s.instance, seq), buffer)
	// Join the group now, so that a relay that cannot (a table split into
	// another number of partitions, say) fails at once.
	sub.renewedAt(time.Now())
	if err := sub.live.ensure(ctx); err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	own, err := s.firstRebalance(ctx, sub)
	if err != nil {
		sub.live.release()
		return nil, fmt.Errorf("relay: %w", err)
	}
	sub.apply(own, nil)
	sub.publishState()
	s.startCompacting()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.states.drop(sub)
		sub.run(ctx)
	}()
	return sub, nil
}

// firstRebalance joins sub's group and takes its first share. A lost
// connection is tried again a few times: PostgreSQL ends an ownership
// transaction left idle past ownerIdleLimit, which a process starved of
// CPU can reach, and Subscribe would fail on what the next try gets
// through. The later rebalances are retried by the run loop's schedule.
func (s *Source) firstRebalance(ctx context.Context, sub *Subscription) (ownership, error) {
	const tries = 3
	for try := 1; ; try++ {
		own, err := s.store.rebalance(ctx, sub.topic, sub.holder, nil, &sub.dead)
		if err == nil || try == tries || !connerr.Lost(err) {
			return own, err
		}
		select {
		case <-ctx.Done():
			return ownership{}, ctx.Err()
		case <-time.After(time.Duration(try) * 100 * time.Millisecond):
		}
	}
}

// nextSeq numbers a subscription's name.
func (s *Source) nextSeq() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nextSeqLocked()
}

func (s *Source) nextSeqLocked() int {
	s.seq++
	return s.seq
}

// IsClosed tells Close was called.
func (s *Source) IsClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close stops every subscription: deliveries settled so far are recorded,
// and every row still held is released for the next reader.
func (s *Source) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	s.mu.Unlock()
	s.wg.Wait()
	if s.stopNote != nil {
		s.stopNote()
	}
	s.live.close() // each subscription gave its lock back; this ends the session
	s.stopClaims()
	return nil
}

// Closing is closed once Close is called.
func (s *Source) Closing() <-chan struct{} { return s.closing }

// countBytes adds delta to the bytes its subscriptions hold, and keeps
// the peak.
func (s *Source) countBytes(delta int64) {
	held := s.bytesHeld.Add(delta)
	for peak := s.bytesPeak.Load(); held > peak && !s.bytesPeak.CompareAndSwap(peak, held); {
		peak = s.bytesPeak.Load()
	}
}

type claimResult struct {
	rows    []*engine.Row
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

// compactEvery is how often a source moves the delivered log's floor: the
// log holds about this long of deliveries, and a claim from the floor
// steps over about as much (every rescan reads from it). Measured: every
// 2 s cost PostgreSQL more per event than every 500 ms.
const compactEvery = 500 * time.Millisecond

// startCompacting starts, once, the loop that moves the delivered log's
// floor, when the table keeps one. Every relay of the table runs it; they
// take turns on the floor's row.
func (s *Source) startCompacting() {
	if !s.store.logged || s.compacts {
		return
	}
	s.compacts = true
	every := compactEvery
	if s.Hooks.CompactEvery > 0 {
		every = s.Hooks.CompactEvery
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		failures := 0
		for {
			select {
			case <-s.closing:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), max(every, 30*time.Second))
			err := s.store.compact(ctx)
			cancel()
			switch {
			case err == nil && failures > 0:
				s.cfg.Logger.Info("Moving the delivered log's floor works again", nil)
				failures = 0
			case err != nil:
				if failures++; failures <= 3 {
					s.cfg.Logger.Error("Moving the delivered log's floor failed; trying again", err, nil)
				}
			}
		}
	}()
}
