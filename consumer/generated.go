package consumer

// This file holds what the generated handlers call, and nothing else: the
// code ent generates with entoutbox's extension lives in the user's module,
// so these are exported, but nothing here is for code written by hand.

import (
	"bytes"
	"context"
	stdsql "database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"entgo.io/ent/dialect"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/internal/tracing"
	"github.com/entoutbox/entoutbox/metrics"
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

// For generated code. Set is a handler set: the typed handlers registered
// per consumer name.
type Set struct {
	cfg        Config
	tracer     *tracing.Tracer
	types      map[string]EventType
	deadLetter func(context.Context, DeadLetter) error
	tables     Tables // "" names for tables the generated code does not know

	mu       sync.Mutex
	handlers map[string]map[string]HandlerFunc // consumer -> event name -> handler
}

// For generated code. NewSet returns an empty handler set for the declared
// event types; deadLetter stores what consumers give up on. Handlers
// generated before the consumer positions call it; NewSetFor says which
// tables the generated code writes.
func NewSet(types []EventType, deadLetter func(context.Context, DeadLetter) error, opts ...Option) *Set {
	return NewSetFor(types, Tables{}, deadLetter, opts...)
}

// For generated code. NewSetFor returns an empty handler set for the
// declared event types, whose generated code writes tables; deadLetter
// stores what consumers give up on.
func NewSetFor(types []EventType, tables Tables, deadLetter func(context.Context, DeadLetter) error, opts ...Option) *Set {
	cfg := newConfig(opts)
	s := &Set{cfg: cfg, tracer: tracing.New(cfg.TracerProvider), types: map[string]EventType{}, deadLetter: deadLetter,
		tables: tables, handlers: map[string]map[string]HandlerFunc{}}
	for _, t := range types {
		s.types[t.Name] = t
	}
	return s
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

// For generated code. AddToRouter adds one Watermill handler per consumer
// name and topic to r, each reading from a subscriber made by newSubscriber
// for that consumer name (its consumer group on the broker).
func (s *Set) AddToRouter(r *message.Router, newSubscriber func(consumer string) (message.Subscriber, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.handlers) == 0 {
		return errors.New("consumer: no handler registered")
	}
	for _, consumer := range sortedKeys(s.handlers) {
		sub, err := newSubscriber(consumer)
		if err != nil {
			return fmt.Errorf("consumer: subscriber for %q: %w", consumer, err)
		}
		topics := map[string]bool{}
		for name := range s.handlers[consumer] {
			topics[s.types[name].Topic] = true
		}
		for _, topic := range sortedKeys(topics) {
			full := s.cfg.TopicPrefix + topic
			// The full name, for when nothing arrives: a prefix that differs
			// from the relay's --topic-prefix reads a topic no one writes.
			s.cfg.Logger.Info("Consumer subscribing", map[string]any{
				"consumer": consumer, "topic": full, "topic_prefix": s.cfg.TopicPrefix})
			r.AddConsumerHandler(consumer+"/"+full, full, sub, func(msg *message.Message) error {
				return s.Handle(msg.Context(), consumer, msg)
			})
		}
	}
	return nil
}

// For generated code. Handle runs one delivery of msg to consumer: decode
// and upcast, then up to MaxAttempts tries of the handler with backoff, then
// the dead letters. It returns an error only when the delivery must be
// retried by the broker (nacked): ctx ended during the backoff, or a dead
// letter could not be stored. A message this consumer has no handler for is
// acknowledged.
//
// The handler's ctx carries the event (events.WithCause), so that the
// events it emits carry causation and correlation ids, and, while tracing
// is on, the delivery's consumer span.
func (s *Set) Handle(ctx context.Context, consumer string, msg *message.Message) (err error) {
	m, metaErr := metaOf(msg)
	m.Consumer = consumer
	subscribed := message.SubscribeTopicFromCtx(ctx)
	if subscribed != "" {
		m.Topic = strings.TrimPrefix(subscribed, s.cfg.TopicPrefix)
	}
	typ, known := s.types[m.Name]
	event := metricsUnknownEvent // a label for what no declaration names
	if known {
		event = m.Name
	}
	var deadLettered string // the reason, for the span
	destination := subscribed
	if destination == "" && known {
		destination = s.cfg.TopicPrefix + typ.Topic
	}
	if tracer := s.tracer.Get(); tracer != nil {
		var span trace.Span
		ctx, span = startProcess(ctx, tracer, consumer, destination, msg)
		defer func() { endProcess(span, err, deadLettered) }()
	}
	setAside := func(reason string, attempts int, d time.Duration) error {
		if err := s.giveUp(ctx, m, destination, msg, reason, attempts); err != nil {
			return err
		}
		deadLettered = reason
		s.cfg.Metrics.Delivery(consumer, event, metrics.ResultDeadLettered, d)
		return nil
	}
	if metaErr != nil {
		return setAside(metaErr.Error(), 0, 0)
	}
	if !known {
		return setAside(fmt.Sprintf("unknown event %q (version %d): this code declares no such event", m.Name, m.Version), 0, 0)
	}
	s.mu.Lock()
	fn := s.handlers[consumer][m.Name]
	s.mu.Unlock()
	if fn == nil {
		return nil // an event on the topic this consumer does not handle
	}
	payload, err := decode(typ, m, msg)
	if err != nil {
		return setAside(err.Error(), 0, 0)
	}
	for attempt := 1; ; attempt++ {
		m.Attempt = attempt
		started := time.Now()
		err := fn(events.WithCause(ctx, m), payload, m)
		took := time.Since(started)
		if err == nil {
			s.cfg.Metrics.Delivery(consumer, event, metrics.ResultHandled, took)
			s.cfg.Metrics.Handled(consumer, event, m.CreatedAt)
			return nil
		}
		if errors.Is(err, ErrDuplicate) {
			s.cfg.Metrics.Delivery(consumer, event, metrics.ResultDuplicate, took)
			return nil
		}
		if attempt >= s.cfg.MaxAttempts {
			return setAside(err.Error(), attempt, took)
		}
		s.cfg.Metrics.Delivery(consumer, event, metrics.ResultRetried, took)
		s.cfg.Logger.Info("Handler failed, retrying", map[string]any{
			"consumer": consumer, "event_id": m.EventID, "attempt": attempt, "err": err.Error()})
		select {
		case <-ctx.Done():
			return fmt.Errorf("consumer: %q stopped while retrying event %s: %w", consumer, m.EventID, err)
		case <-time.After(s.cfg.backoff(attempt)):
		}
	}
}

// decode turns msg's payload into typ's latest version. A version newer
// than this code knows, from a producer deployed first, is read as the
// latest when the producer says consumers of it can (events.MetaReadableFrom:
// every step since is forward compatible, so the unknown fields are
// ignored); otherwise it is refused with what the operator does.
func decode(typ EventType, m events.Meta, msg *message.Message) (any, error) {
	if m.Version <= typ.Latest {
		return typ.Decode(m.Version, msg.Payload)
	}
	from, err := strconv.Atoi(msg.Metadata.Get(events.MetaReadableFrom))
	if err != nil || from < 1 || from > typ.Latest {
		return nil, fmt.Errorf("event %q version %d is newer than the newest this code knows (%d) and not readable as version %d; "+
			"deploy the consumer that knows it, then `entoutbox dead-letters retry`", m.Name, m.Version, typ.Latest, typ.Latest)
	}
	payload, err := typ.Decode(typ.Latest, msg.Payload)
	if err != nil {
		return nil, fmt.Errorf("event %q version %d read as version %d: %w", m.Name, m.Version, typ.Latest, err)
	}
	return payload, nil
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
// dead-letter check is an index lookup on event_id.
func RecordDelivery(ctx context.Context, tx dialect.ExecQuerier, t Tables, m events.Meta) (bool, error) {
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
// kept as received.
func InsertDeadLetter(ctx context.Context, db dialect.ExecQuerier, table string, d DeadLetter) error {
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
	insert := func(ctx context.Context, db dialect.ExecQuerier) error {
		var res stdsql.Result
		t := pgsql.QuoteIdent(table)
		return db.Exec(ctx, `INSERT INTO `+t+` (event_id, source, event_name, event_version, topic,
		aggregate_type, aggregate_id, payload, headers, reason, attempts)
		SELECT $1::uuid, $2::text, $3::text, $4::bigint, $5::text, $6::text, $7::text, $8::bytea, $9::jsonb, $10::text, $11::bigint
		WHERE $1::uuid IS NULL OR NOT EXISTS (SELECT 1 FROM `+t+` WHERE event_id = $1::uuid AND source = $2::text)`,
			[]any{eventID, d.Meta.Consumer, d.Meta.Name, d.Meta.Version, d.Meta.Topic, d.Meta.AggregateType,
				d.Meta.AggregateID, d.Payload, headers, d.Reason, d.Attempts}, &res)
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

// For generated code. StoreDeadLetter writes d into the dead-letter table
// of t (see InsertDeadLetter).
func StoreDeadLetter(ctx context.Context, db dialect.ExecQuerier, t Tables, d DeadLetter) error {
	return InsertDeadLetter(ctx, db, t.DeadLetters, d)
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
