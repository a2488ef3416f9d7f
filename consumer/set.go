package consumer

// The handler set: the typed handlers the generated code registers per
// consumer name, and how each is run (alone, or in a batch: internal/batching).

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"entgo.io/ent/dialect"

	"github.com/entoutbox/entoutbox/consumer/internal/batching"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/tracing"
)

// For generated code. Set is a handler set: the typed handlers registered
// per consumer name.
type Set struct {
	cfg        Config
	tracer     *tracing.Tracer
	types      map[string]EventType
	deadLetter func(context.Context, DeadLetter) error
	db         dialect.ExecQuerier // the consumers' database; nil without positions
	tables     Tables              // "" names for tables the generated code does not know
	begin      func(context.Context) (Tx, error)
	batch      *batching.Batcher // nil: one event per transaction
	turns      turns             // wakes deliveries waiting for an aggregate's previous event
	stalls     stallWatch        // says when a topic's waiting events make no progress (stall.go)
	wake       *waker            // and when another instance applies one
	breaker    *breaker          // pauses the set while its database cannot be reached (outage.go)
	tenants    *tenantSets       // set for a set whose events are applied in their tenant's database (tenants.go)
	// slots bounds the set's own transactions and statements outside
	// batches to Concurrency at once (Set.own).
	slots chan struct{}

	mu         sync.Mutex
	handlers   map[string]map[string]HandlerFunc   // consumer -> event name -> handler
	txHandlers map[string]map[string]TxHandlerFunc // the same, for those registered in tx
	// manyHandlers are those registered with RegisterBatchInTx; their
	// txHandlers entry runs them for one event.
	manyHandlers map[string]map[string]*batching.Handler

	warnedUnordered atomic.Bool // said that events without a seq are not put in order
	// startWaits holds the consumer/topic pairs for which the set said
	// that aggregates wait StartAfter for their first events (wait.go).
	startWaits sync.Map
}

// For generated code. NewSet returns an empty handler set for the declared
// event types; deadLetter stores what consumers give up on. Handlers
// generated before the consumer positions call it; NewSetFor says which
// tables the generated code writes.
func NewSet(types []EventType, deadLetter func(context.Context, DeadLetter) error, opts ...Option) *Set {
	return NewSetFor(types, nil, Tables{}, deadLetter, opts...)
}

// For generated code. NewSetFor returns an empty handler set for the
// declared event types, whose generated code writes tables in db;
// deadLetter stores what consumers give up on. The set itself writes the
// positions outside a handler's transaction (a gap's waiting time, an
// aggregate's start) through db.
func NewSetFor(types []EventType, db dialect.ExecQuerier, tables Tables, deadLetter func(context.Context, DeadLetter) error,
	opts ...Option) *Set {
	if db == nil {
		tables.Positions = "" // nothing to keep them with
	}
	tables.Dialect = outboxdb.DialectFrom(db)
	cfg := newConfig(opts)
	if tables.Dialect == outboxdb.SQLite || tables.Dialect == outboxdb.MySQL {
		// The batches' run statement takes arrays, which SQLite and MySQL
		// have not.
		cfg.BatchSize = 1
	}
	s := &Set{cfg: cfg, tracer: tracing.New(cfg.TracerProvider), types: map[string]EventType{}, deadLetter: deadLetter,
		db: db, tables: tables, slots: make(chan struct{}, cfg.Concurrency), handlers: map[string]map[string]HandlerFunc{},
		txHandlers: map[string]map[string]TxHandlerFunc{}, manyHandlers: map[string]map[string]*batching.Handler{}}
	for _, t := range types {
		s.types[t.Name] = t
	}
	s.turns.progressed = s.appliedOnTopic
	s.wake = newWaker(db, tables, &s.turns, cfg.Logger)
	s.breaker = newBreaker(db, cfg.outagePauses, cfg.Logger)
	return s
}

// For generated code. NewTxSet is NewSetFor whose handlers are registered
// with RegisterInTx: begin starts a transaction of the generated code's
// client, in which the set records each event, runs its handler and
// commits, one or many events per transaction (Config.BatchSize).
func NewTxSet(types []EventType, begin func(context.Context) (Tx, error), db dialect.ExecQuerier, tables Tables,
	deadLetter func(context.Context, DeadLetter) error, opts ...Option) *Set {
	s := NewSetFor(types, db, tables, deadLetter, opts...)
	s.begin = begin
	if s.cfg.BatchSize > 1 {
		s.batch = &batching.Batcher{Begin: begin, Tables: s.tables, Size: s.cfg.BatchSize, Max: s.cfg.Concurrency,
			Committed: s.cfg.Metrics.Batch, Moved: s.turns.applied, Covered: s.turns.covered, ParkFor: s.cfg.GapWait}
		s.turns.left = func(k turnKey) { s.batch.ParkedMoved(k.consumer, k.topic, k.aggregateType, k.aggregateID) }
	}
	return s
}

// For generated code. RegisterInTx adds fn as consumer's handler of the
// named event, run in a transaction the set begins (NewTxSet).
func (s *Set) RegisterInTx(consumer, event string, fn TxHandlerFunc) error {
	if err := s.registerInTx(consumer, event, fn); err != nil {
		return err
	}
	if s.tenants != nil {
		return s.tenants.register(consumer, event, registration{one: fn})
	}
	return nil
}

func (s *Set) registerInTx(consumer, event string, fn TxHandlerFunc) error {
	var alone HandlerFunc // nil for a nil fn, which Register refuses
	if fn != nil {
		if s.begin == nil {
			return fmt.Errorf("consumer: %q: handler of %q registered in a transaction, on a set made without NewTxSet", consumer, event)
		}
		alone = s.alone(fn)
	}
	if err := s.register(consumer, event, alone); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.txHandlers[consumer] == nil {
		s.txHandlers[consumer] = map[string]TxHandlerFunc{}
	}
	s.txHandlers[consumer][event] = fn
	return nil
}

// For generated code. RegisterBatchInTx adds fn as consumer's handler of
// the named event, given many events at once: the events of a batch
// (Config.BatchSize) that it handles, sorted by aggregate, each
// aggregate's in their order without a hole (a hot aggregate's run is one
// call; its events of other kinds before the run are handled in an
// earlier call). An event handled alone (a retry, after its batch failed)
// is given alone.
func (s *Set) RegisterBatchInTx(consumer, event string, fn TxBatchHandlerFunc) error {
	var one TxHandlerFunc // nil for a nil fn, which RegisterInTx refuses
	if fn != nil {
		one = func(ctx context.Context, tx Tx, payload any, m events.Meta) error {
			return fn(ctx, tx, []any{payload}, []events.Meta{m})
		}
	}
	if err := s.registerInTx(consumer, event, one); err != nil {
		return err
	}
	s.mu.Lock()
	if s.manyHandlers[consumer] == nil {
		s.manyHandlers[consumer] = map[string]*batching.Handler{}
	}
	s.manyHandlers[consumer][event] = &batching.Handler{Fn: fn}
	s.mu.Unlock()
	if s.tenants != nil {
		return s.tenants.register(consumer, event, registration{many: fn})
	}
	return nil
}

// alone runs fn for one event in a transaction of its own: the dedupe
// record (and the position), then the handler, then the commit. It returns
// ErrDuplicate, writing nothing, for an event handled before or set aside
// as a dead letter by its consumer; a handler panic is a *PanicError.
func (s *Set) alone(fn TxHandlerFunc) HandlerFunc {
	return func(ctx context.Context, payload any, m events.Meta) (err error) {
		release, err := s.own(ctx)
		if err != nil {
			return err
		}
		defer release()
		tx, err := s.begin(ctx)
		if err != nil {
			return err
		}
		defer func() {
			if v := recover(); v != nil {
				err = &PanicError{Value: v}
			}
			if err != nil {
				_ = tx.Rollback()
			}
		}()
		fresh, err := RecordDelivery(ctx, tx, s.tables, m)
		if err != nil {
			return err
		}
		if !fresh {
			return ErrDuplicate
		}
		if err := fn(ctx, tx, payload, m); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		s.cfg.Metrics.Batch(1)
		s.turns.applied(m)
		return nil
	}
}

// own takes one of the set's slots for a transaction or statement of its
// own, outside batches; release gives it back. An instance holding
// hundreds of messages (NATS max_in_flight) would otherwise run as many at
// once, each on a connection of the pool: a pool that keeps few idle ones
// (database/sql keeps 2) then opens and closes connections all the time.
func (s *Set) own(ctx context.Context) (release func(), err error) {
	select {
	case s.slots <- struct{}{}:
		return func() { <-s.slots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// For generated code. Register adds fn as consumer's handler of the named
// event. Each consumer name handles an event once; two names both see it.
func (s *Set) Register(consumer, event string, fn HandlerFunc) error {
	if s.tenants != nil {
		// Its handler would run on no tenant's database.
		return fmt.Errorf("consumer: %q: handler of %q registered without a transaction, on a set made for tenants", consumer, event)
	}
	return s.register(consumer, event, fn)
}

func (s *Set) register(consumer, event string, fn HandlerFunc) error {
	if d, ok := s.db.(interface{ Dialect() string }); ok && d.Dialect() != dialect.Postgres && d.Dialect() != dialect.SQLite &&
		d.Dialect() != dialect.MySQL {
		return fmt.Errorf("consumer: %q: handlers run on PostgreSQL, MySQL and SQLite, not on %s", consumer, d.Dialect())
	}
	if consumer == "" {
		return fmt.Errorf("consumer: handler of %q: consumer name is empty", event)
	}
	if fn == nil {
		return fmt.Errorf("consumer: %q: handler of %q is nil", consumer, event)
	}
	if _, ok := s.types[event]; !ok {
		return fmt.Errorf("consumer: %q: unknown event %q", consumer, event)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.handlers[consumer] == nil {
		s.handlers[consumer] = map[string]HandlerFunc{}
	}
	if _, dup := s.handlers[consumer][event]; dup {
		return fmt.Errorf("consumer: %q already has a handler for %q", consumer, event)
	}
	s.handlers[consumer][event] = fn
	return nil
}
