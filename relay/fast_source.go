package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/relay/internal/engine"
)

// fastSource is the fast read path: it claims rows in batches, hands out
// many at once but at most one per aggregate at a time (the next one after
// the previous is settled), wakes up on LISTEN/NOTIFY with polling as the
// fallback, and records deliveries in batches. Several sources, in one
// process or many, share a table: each subscription owns a fair share of
// its topic's partitions (see store).
//
// What it hands out are fastDeliveries, each settled once: delivered,
// unsent, or failed with the failure policy's decision. The relay's engine
// publishes them; the public Subscriber hands them to a Watermill consumer.
type fastSource struct {
	cfg        SubscriberConfig
	attrs      engine.Attributes // what cfg.CloudEvents adds to every message
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
	instance string // random, tells this source from any other with its RelayID
	// bytesHeld is what its subscriptions hold as MaxBytesInFlight counts
	// it, and bytesPeak the most they held at once.
	bytesHeld, bytesPeak atomic.Int64
	// states is what each subscription last published, for Status.
	states subscriberStates
	// hooks is zero outside this package's tests.
	hooks testHooks
}

// testHooks are seams for this package's tests (set in export_test.go
// before Subscribe): each, when set, runs first in what it names, and may
// block it or fail it with an error, as a database that hangs or refuses
// would.
type testHooks struct {
	renew     func(context.Context) error // a renewal of the leases by a run loop
	liveCheck func(context.Context) error // a check that the liveness lock's session is there
	// rescanEvery, when set, replaces the constant: for tests that tell a
	// row woken by its notification from one the rescan found.
	rescanEvery time.Duration
	// slotCreating runs on the WAL path right before it creates its slot.
	slotCreating func()
}

// rescanInterval is how often a caught-up subscription rescans.
func (s *fastSource) rescanInterval() time.Duration {
	if s.hooks.rescanEvery > 0 {
		return s.hooks.rescanEvery
	}
	return rescanEvery
}

// newLiveness is the lock of life of the subscription named holder, on
// the session all s's subscriptions share.
func (s *fastSource) newLiveness(holder string) *liveness { return s.live.forHolder(holder) }

// newFastSource returns a fast source on db (the pgx database/sql driver).
func newFastSource(db *sql.DB, cfg SubscriberConfig) (*fastSource, error) {
	if db == nil {
		return nil, errors.New("relay: DB is nil")
	}
	if err := cfg.validate("SubscriberConfig."); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	s := &fastSource{cfg: cfg, attrs: cfg.CloudEvents.attributes(), store: newStore(db, cfg), closing: make(chan struct{}),
		instance: uuid.NewString()[:8]}
	s.live = newLiveSession(db, cfg.Table, cfg.PollOnly, &s.hooks)
	s.claims, s.stopClaims = shareClaimPool(db, cfg.PollOnly)
	if listenDB := cfg.listenDB(db); listenDB != nil {
		s.notifier, s.stopNote = shareListener(db, listenDB, cfg.Table, cfg.Logger, cfg.PollInterval)
	} else {
		s.notifier = newNotifier(db, "entoutbox_check_"+s.instance) // never woken: it polls
	}
	return s, nil
}

// subscribe starts reading the rows of topic (AllTopics for every topic).
// The subscription's out channel, of room buffer, closes when ctx ends or
// the source is closed.
func (s *fastSource) subscribe(ctx context.Context, topic string, buffer int) (*subscription, error) {
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
	own, err := s.store.rebalance(ctx, topic, sub.holder, nil, &sub.dead)
	if err != nil {
		sub.live.release()
		return nil, fmt.Errorf("relay: %w", err)
	}
	sub.apply(own, nil)
	sub.publishState()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.states.drop(sub)
		sub.run(ctx)
	}()
	return sub, nil
}

// nextSeq numbers a subscription's name.
func (s *fastSource) nextSeq() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nextSeqLocked()
}

func (s *fastSource) nextSeqLocked() int {
	s.seq++
	return s.seq
}

// isClosed tells close was called.
func (s *fastSource) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// close stops every subscription: deliveries settled so far are recorded,
// and every row still held is released for the next reader.
func (s *fastSource) close() error {
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

// countBytes adds delta to the bytes its subscriptions hold, and keeps
// the peak.
func (s *fastSource) countBytes(delta int64) {
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
