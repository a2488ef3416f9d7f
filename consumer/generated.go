package consumer

// This file holds what the generated handlers call, and nothing else: the
// code ent generates with entoutbox's extension lives in the user's module,
// so these are exported, but nothing here is for code written by hand.

import (
	"bytes"
	"context"
	stdsql "database/sql"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

	"entgo.io/ent/dialect"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/internal/tracing"
)

// For generated code. EventType describes a declared event to the run time;
// the generated code builds one per event.
type EventType struct {
	Name   string
	Topic  string
	Latest int
	// Decode turns a payload of the given version into the latest version's
	// struct, upcasting and validating it. Its error, for a payload that
	// can never be handled, is the reason the dead letter is stored with.
	Decode func(version int, payload []byte) (any, error)
}

// For generated code. HandlerFunc is one registered handler with its
// transaction and dedupe around it. It returns ErrDuplicate when skipped.
type HandlerFunc func(ctx context.Context, payload any, m events.Meta) error

// For generated code. Tx is a transaction the set begins for handlers
// registered with RegisterInTx: the generated code's ent transaction,
// with its driver to write the dedupe records and positions through.
type Tx interface {
	dialect.ExecQuerier
	Commit() error
	Rollback() error
}

// For generated code. TxHandlerFunc is one registered handler, run in tx,
// which the set began, recorded the event in and commits: it writes the
// event's effect. Several events' handlers may share one tx (batch.go).
type TxHandlerFunc func(ctx context.Context, tx Tx, payload any, m events.Meta) error

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
	batch      *batcher // nil: one event per transaction

	mu         sync.Mutex
	handlers   map[string]map[string]HandlerFunc   // consumer -> event name -> handler
	txHandlers map[string]map[string]TxHandlerFunc // the same, for those registered in tx

	warnedUnordered atomic.Bool // said that events without a seq are not put in order
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
	cfg := newConfig(opts)
	s := &Set{cfg: cfg, tracer: tracing.New(cfg.TracerProvider), types: map[string]EventType{}, deadLetter: deadLetter,
		db: db, tables: tables, handlers: map[string]map[string]HandlerFunc{},
		txHandlers: map[string]map[string]TxHandlerFunc{}}
	for _, t := range types {
		s.types[t.Name] = t
	}
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
		s.batch = &batcher{begin: begin, t: s.tables, size: s.cfg.BatchSize, max: s.cfg.Concurrency, applied: s.cfg.Metrics.Batch}
	}
	return s
}

// For generated code. RegisterInTx adds fn as consumer's handler of the
// named event, run in a transaction the set begins (NewTxSet).
func (s *Set) RegisterInTx(consumer, event string, fn TxHandlerFunc) error {
	var alone HandlerFunc // nil for a nil fn, which Register refuses
	if fn != nil {
		if s.begin == nil {
			return fmt.Errorf("consumer: %q: handler of %q registered in a transaction, on a set made without NewTxSet", consumer, event)
		}
		alone = s.alone(fn)
	}
	if err := s.Register(consumer, event, alone); err != nil {
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

// alone runs fn for one event in a transaction of its own: the dedupe
// record (and the position), then the handler, then the commit. It returns
// ErrDuplicate, writing nothing, for an event handled before or set aside
// as a dead letter by its consumer; a handler panic is a *PanicError.
func (s *Set) alone(fn TxHandlerFunc) HandlerFunc {
	return func(ctx context.Context, payload any, m events.Meta) (err error) {
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
		return nil
	}
}

// For generated code. Register adds fn as consumer's handler of the named
// event. Each consumer name handles an event once; two names both see it.
func (s *Set) Register(consumer, event string, fn HandlerFunc) error {
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

// For generated code. RecordProcessed inserts (consumer, event id) into the
// processed-events table through the handler's transaction. It returns
// false, without error, when the pair is already there: the event was
// handled before. A concurrent delivery of the same event waits on the
// unique index until the first transaction ends, so only one of them
// proceeds. Handlers generated by this version call RecordDelivery instead,
// which also skips an event already dead-lettered.
func RecordProcessed(ctx context.Context, tx dialect.ExecQuerier, table string, m events.Meta) (bool, error) {
	var res stdsql.Result
	err := tx.Exec(ctx, `INSERT INTO `+pgsql.QuoteIdent(table)+` (consumer, event_id, event_name, attempts)
		VALUES ($1, $2, $3, $4) ON CONFLICT (consumer, event_id) DO NOTHING`,
		[]any{m.Consumer, m.EventID, m.Name, max(m.Attempt, 1)}, &res)
	if err != nil {
		return false, fmt.Errorf("consumer: recording event %s as processed by %q: %w", m.EventID, m.Consumer, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// For generated code. Tables names the tables of a generated handler set.
type Tables struct {
	Processed   string // the processed-events (dedupe) table
	DeadLetters string // the dead-letter table
	// Positions is the consumers' per-aggregate positions table
	// (schema.ConsumerPosition); "" when the application has none, and
	// then an aggregate's events are not put in order by the consumer.
	Positions string
}

// For generated code. RecordDelivery is RecordProcessed that also returns
// false when this consumer already set the event aside as a dead letter: a
// redelivered poison event is acknowledged without running its attempts
// again. One statement, so a delivery costs no extra round trip; the
// dead-letter check is an index lookup on event_id. When t has positions
// and the event a seq, it also puts the event in its aggregate's order
// (order.go): an *OutOfOrderError or a *HeldError for one that must not
// be applied now.
func RecordDelivery(ctx context.Context, tx dialect.ExecQuerier, t Tables, m events.Meta) (bool, error) {
	if ordered(t, m) {
		return recordInOrder(ctx, tx, t, m)
	}
	var res stdsql.Result
	err := tx.Exec(ctx, `INSERT INTO `+pgsql.QuoteIdent(t.Processed)+` (consumer, event_id, event_name, attempts)
		SELECT $1::text, $2::uuid, $3::text, $4::bigint
		WHERE NOT EXISTS (SELECT 1 FROM `+pgsql.QuoteIdent(t.DeadLetters)+` WHERE event_id = $2::uuid AND source = $1::text)
		ON CONFLICT (consumer, event_id) DO NOTHING`,
		[]any{m.Consumer, m.EventID, m.Name, max(m.Attempt, 1)}, &res)
	if err != nil {
		return false, fmt.Errorf("consumer: recording event %s as processed by %q: %w", m.EventID, m.Consumer, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// For generated code. InvalidPayload is the error of a payload that decoded
// but does not validate as the latest version; it says whether it was upcast
// first.
func InvalidPayload(version, latest int, err error) error {
	if version == latest {
		return err // it names the event and version already
	}
	return fmt.Errorf("version %d payload upcast to version %d: %w", version, latest, err)
}

// For generated code. InsertDeadLetter writes d into the dead-letter table,
// unless this consumer already set the same event aside: a delivery nacked
// after its dead letter was stored (the ack was lost) comes again and must
// not be stored twice. Text PostgreSQL cannot hold (NUL, bytes that are not
// UTF-8) is stored escaped, and the reason says so; the payload is bytea and
// kept as received. Handlers generated by this version call
// StoreDeadLetter instead.
func InsertDeadLetter(ctx context.Context, db dialect.ExecQuerier, table string, d DeadLetter) error {
	return insertDeadLetter(ctx, db, table, false, d, nil)
}

// For generated code. StoreDeadLetter writes d into the dead-letter table
// of t (see InsertDeadLetter), with its aggregate_seq when t has
// positions, and, for an event with a seq, holds its aggregate or passes
// over it (WithPassOverDeadLetters) in the same transaction.
func StoreDeadLetter(ctx context.Context, db dialect.ExecQuerier, t Tables, d DeadLetter) error {
	if !ordered(t, d.Meta) {
		return insertDeadLetter(ctx, db, t.DeadLetters, t.Positions != "", d, nil)
	}
	return insertDeadLetter(ctx, db, t.DeadLetters, true, d, func(ctx context.Context, tx dialect.ExecQuerier) error {
		return holdOrPass(ctx, tx, t, d.Meta, d.order)
	})
}

// insertDeadLetter is InsertDeadLetter, writing aggregate_seq too when
// withSeq (tables generated before it have no such column), and running
// first, in the same transaction, what the letter does to the positions.
func insertDeadLetter(ctx context.Context, db dialect.ExecQuerier, table string, withSeq bool, d DeadLetter,
	positions func(context.Context, dialect.ExecQuerier) error) error {
	d = storable(d)
	var eventID any
	if d.Meta.EventID != uuid.Nil {
		eventID = d.Meta.EventID
	}
	var headers any
	if len(d.Meta.Headers) > 0 {
		b, err := json.Marshal(d.Meta.Headers)
		if err != nil {
			return err
		}
		headers = string(b)
	}
	columns, values := "", ""
	args := []any{eventID, d.Meta.Consumer, d.Meta.Name, d.Meta.Version, d.Meta.Topic, d.Meta.AggregateType,
		d.Meta.AggregateID, d.Payload, headers, d.Reason, d.Attempts}
	if withSeq {
		var seq any
		if d.Meta.AggregateSeq > 0 {
			seq = d.Meta.AggregateSeq
		}
		columns, values, args = ", aggregate_seq", ", $12::bigint", append(args, seq)
	}
	insert := func(ctx context.Context, db dialect.ExecQuerier) error {
		if positions != nil {
			if err := positions(ctx, db); err != nil {
				return err
			}
		}
		var res stdsql.Result
		t := pgsql.QuoteIdent(table)
		return db.Exec(ctx, `INSERT INTO `+t+` (event_id, source, event_name, event_version, topic,
		aggregate_type, aggregate_id, payload, headers, reason, attempts`+columns+`)
		SELECT $1::uuid, $2::text, $3::text, $4::bigint, $5::text, $6::text, $7::text, $8::bytea, $9::jsonb, $10::text, $11::bigint`+values+`
		WHERE $1::uuid IS NULL OR NOT EXISTS (SELECT 1 FROM `+t+` WHERE event_id = $1::uuid AND source = $2::text)`,
			args, &res)
	}
	var err error
	if drv, ok := db.(dialect.Driver); ok && eventID != nil {
		err = insertLocked(ctx, drv, table+"/"+d.Meta.Consumer+"/"+d.Meta.EventID.String(), insert)
	} else {
		err = insert(ctx, db)
	}
	if err != nil {
		return fmt.Errorf("consumer: writing dead letter of event %s for consumer %q to %s: %w", d.Meta.EventID, d.Meta.Consumer, table, err)
	}
	return nil
}

// For generated code. DecodeFields decodes a JSON object keeping numbers
// exact, for upcasters.
func DecodeFields(payload []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(payload))
	d.UseNumber()
	var fields map[string]any
	if err := d.Decode(&fields); err != nil {
		return nil, fmt.Errorf("payload is not a JSON object: %w", err)
	}
	return fields, nil
}

// For generated code. FillDefaults sets each default whose key fields lacks:
// the automatic step between two versions in the upcast path.
func FillDefaults(fields, defaults map[string]any) {
	for k, v := range defaults {
		if _, ok := fields[k]; !ok {
			fields[k] = v
		}
	}
}
