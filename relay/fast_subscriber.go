package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
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
	cfg        SubscriberConfig
	store      *store
	notifier   *notifier
	live       *liveSession // holds the liveness locks of all its subscriptions
	claims     *claimPool   // the connections its claims run on, shared by the process
	stopClaims func()

	mu       sync.Mutex
	closed   bool
	closing  chan struct{}
	wg       sync.WaitGroup
	stopNote func()   // lets go of its share of the LISTEN connection
	reasons  sync.Map // *message.Message -> nackReason
	seq      int      // numbers the subscriptions: each owns partitions under its own name
	instance string   // random, tells this Subscriber from any other with its RelayID
	// bytesHeld is what its subscriptions hold as MaxBytesInFlight counts
	// it, and bytesPeak the most they held at once.
	bytesHeld, bytesPeak atomic.Int64
	// states is what each subscription last published, for Status.
	states subscriberStates
	// direct is set by the relay of this package before it subscribes: it
	// settles messages with settle rather than Ack and Nack.
	direct bool
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
}

// rescanInterval is how often a caught-up subscription rescans.
func (s *Subscriber) rescanInterval() time.Duration {
	if s.hooks.rescanEvery > 0 {
		return s.hooks.rescanEvery
	}
	return rescanEvery
}

// newLiveness is the lock of life of the subscription named holder, on
// the session all s's subscriptions share.
func (s *Subscriber) newLiveness(holder string) *liveness { return s.live.forHolder(holder) }

// nackReason is why a message handed out was nacked, kept in reasons until
// its subscription takes the nack.
type nackReason struct {
	failure
	unsent bool // the relay did not publish it (see mayPublish)
}

var _ message.Subscriber = (*Subscriber)(nil)

// NewSubscriber returns a Subscriber on db (the pgx database/sql driver).
func NewSubscriber(db *sql.DB, cfg SubscriberConfig) (*Subscriber, error) {
	if db == nil {
		return nil, errors.New("relay: DB is nil")
	}
	if err := cfg.validate("SubscriberConfig."); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	s := &Subscriber{cfg: cfg, store: newStore(db, cfg), closing: make(chan struct{}), instance: uuid.NewString()[:8]}
	s.live = newLiveSession(db, cfg.Table, cfg.PollOnly, &s.hooks)
	s.claims, s.stopClaims = shareClaimPool(db, cfg.PollOnly)
	if listenDB := cfg.listenDB(db); listenDB != nil {
		s.notifier, s.stopNote = shareListener(db, listenDB, cfg.Table, cfg.Logger, cfg.PollInterval)
	} else {
		s.notifier = newNotifier(db, "entoutbox_check_"+s.instance) // never woken: it polls
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
	sub := newSubscription(s, topic, fmt.Sprintf("%s/%s/%d", s.cfg.RelayID, s.instance, seq))
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

// isClosed tells Close was called.
func (s *Subscriber) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Fail nacks msg and records why. countAttempt false means the failure is
// not the message's own (the broker is away): it is retried without
// counting towards MaxAttempts. A reason that says it is permanent (with a
// Permanent() bool method, as the broker package's InvalidTopicError)
// sends the row to the dead letters at once.
func (s *Subscriber) Fail(msg *message.Message, reason error, countAttempt bool) {
	s.reasons.Store(msg, nackReason{failure: failure{reason: reason.Error(), counts: countAttempt, permanent: permanent(reason)}})
	settle(msg, false)
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
func (s *Subscriber) countBytes(delta int64) {
	held := s.bytesHeld.Add(delta)
	for peak := s.bytesPeak.Load(); held > peak && !s.bytesPeak.CompareAndSwap(peak, held); {
		peak = s.bytesPeak.Load()
	}
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
