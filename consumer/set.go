package consumer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/events"
)

// EventType describes a declared event to the run time; the generated code
// builds one per event.
type EventType struct {
	Name   string
	Topic  string
	Latest int
	// Decode turns a payload of the given version into the latest version's
	// struct, upcasting and validating it. It returns a *DecodeError for a
	// payload that can never be handled.
	Decode func(version int, payload []byte) (any, error)
}

// HandlerFunc is one registered handler with its transaction and dedupe
// around it (generated glue). It returns ErrDuplicate when skipped.
type HandlerFunc func(ctx context.Context, payload any, m events.Meta) error

// Set is a handler set: the typed handlers registered per consumer name.
type Set struct {
	cfg        Config
	types      map[string]EventType
	deadLetter func(context.Context, DeadLetter) error

	mu       sync.Mutex
	handlers map[string]map[string]HandlerFunc // consumer -> event name -> handler
}

// NewSet returns an empty handler set for the declared event types;
// deadLetter stores what consumers give up on.
func NewSet(types []EventType, deadLetter func(context.Context, DeadLetter) error, opts ...Option) *Set {
	s := &Set{cfg: newConfig(opts), types: map[string]EventType{}, deadLetter: deadLetter,
		handlers: map[string]map[string]HandlerFunc{}}
	for _, t := range types {
		s.types[t.Name] = t
	}
	return s
}

// Register adds fn as consumer's handler of the named event. Each consumer
// name handles an event once; two names both see it.
func (s *Set) Register(consumer, event string, fn HandlerFunc) error {
	if consumer == "" {
		return fmt.Errorf("entoutbox: handler of %q: consumer name is empty", event)
	}
	if _, ok := s.types[event]; !ok {
		return fmt.Errorf("entoutbox: consumer %q: unknown event %q", consumer, event)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.handlers[consumer] == nil {
		s.handlers[consumer] = map[string]HandlerFunc{}
	}
	if _, dup := s.handlers[consumer][event]; dup {
		return fmt.Errorf("entoutbox: consumer %q already has a handler for %q", consumer, event)
	}
	s.handlers[consumer][event] = fn
	return nil
}

// AddToRouter adds one Watermill handler per consumer name and topic to r,
// each reading from a subscriber made by newSubscriber for that consumer
// name (its consumer group on the broker).
func (s *Set) AddToRouter(r *message.Router, newSubscriber func(consumer string) (message.Subscriber, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.handlers) == 0 {
		return errors.New("entoutbox: no handler registered")
	}
	for _, consumer := range sortedKeys(s.handlers) {
		sub, err := newSubscriber(consumer)
		if err != nil {
			return fmt.Errorf("entoutbox: subscriber for consumer %q: %w", consumer, err)
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

// Handle runs one delivery of msg to consumer: decode and upcast, then up to
// MaxAttempts tries of the handler with backoff, then the dead letters. It
// returns an error only when the delivery must be retried by the broker
// (nacked): ctx ended during the backoff, or a dead letter could not be
// stored. A message this consumer has no handler for is acknowledged.
func (s *Set) Handle(ctx context.Context, consumer string, msg *message.Message) error {
	m, err := metaOf(msg)
	m.Consumer = consumer
	if t := message.SubscribeTopicFromCtx(ctx); t != "" {
		m.Topic = strings.TrimPrefix(t, s.cfg.TopicPrefix)
	}
	if err != nil {
		return s.giveUp(ctx, m, msg, err.Error(), 0)
	}
	typ, known := s.types[m.Name]
	if !known {
		return s.giveUp(ctx, m, msg, fmt.Sprintf("unknown event %q (version %d): this code declares no such event", m.Name, m.Version), 0)
	}
	s.mu.Lock()
	fn := s.handlers[consumer][m.Name]
	s.mu.Unlock()
	if fn == nil {
		return nil // an event on the topic this consumer does not handle
	}
	if m.Version > typ.Latest {
		return s.giveUp(ctx, m, msg, fmt.Sprintf("event %q version %d is newer than the newest this code knows (%d)", m.Name, m.Version, typ.Latest), 0)
	}
	payload, err := typ.Decode(m.Version, msg.Payload)
	if err != nil {
		return s.giveUp(ctx, m, msg, err.Error(), 0)
	}
	for attempt := 1; ; attempt++ {
		m.Attempt = attempt
		err := fn(ctx, payload, m)
		if err == nil || errors.Is(err, ErrDuplicate) {
			return nil
		}
		if attempt >= s.cfg.MaxAttempts {
			return s.giveUp(ctx, m, msg, err.Error(), attempt)
		}
		s.cfg.Logger.Info("Handler failed, retrying", map[string]any{
			"consumer": consumer, "event_id": m.EventID, "attempt": attempt, "err": err.Error()})
		select {
		case <-ctx.Done():
			return fmt.Errorf("entoutbox: consumer %q stopped while retrying event %s: %w", consumer, m.EventID, err)
		case <-time.After(s.cfg.backoff(attempt)):
		}
	}
}

// giveUp stores the delivery as a dead letter and acknowledges it; if the
// dead letter cannot be stored the delivery is nacked so nothing is lost.
// The broker topic comes first: once the row exists a redelivery is
// skipped, so a topic publish that failed after it would never be made.
func (s *Set) giveUp(ctx context.Context, m events.Meta, msg *message.Message, reason string, attempts int) error {
	d := DeadLetter{Meta: m, Payload: msg.Payload, Reason: reason, Attempts: attempts}
	s.cfg.Logger.Error("Event sent to the dead letters", errors.New(reason),
		map[string]any{"consumer": m.Consumer, "event_id": msg.UUID, "attempts": attempts})
	if s.cfg.DeadLetterPublisher != nil {
		out := message.NewMessage(msg.UUID, msg.Payload)
		out.Metadata = maps.Clone(msg.Metadata)
		out.Metadata.Set(MetaDeadLetterReason, reason)
		out.Metadata.Set(MetaDeadLetterConsumer, m.Consumer)
		out.Metadata.Set(MetaDeadLetterAttempts, strconv.Itoa(attempts))
		if err := s.cfg.DeadLetterPublisher.Publish(s.cfg.DeadLetterTopic, out); err != nil {
			return fmt.Errorf("entoutbox: publishing dead letter %s to %s: %w", msg.UUID, s.cfg.DeadLetterTopic, err)
		}
	}
	return s.deadLetter(ctx, d)
}

// MetaMalformed is set by a broker's unmarshaler on a message it could
// only partly read (a NATS header key repeated, say), to why: the message
// is then dead-lettered with that reason instead of failing in the
// subscriber, where it would be neither acked nor nacked and come back
// for ever.
const MetaMalformed = events.ReservedPrefix + "malformed"

// Metadata set on dead letters published to a broker topic.
const (
	MetaDeadLetterReason   = events.ReservedPrefix + "dead_letter_reason"
	MetaDeadLetterConsumer = events.ReservedPrefix + "dead_letter_consumer"
	MetaDeadLetterAttempts = events.ReservedPrefix + "dead_letter_attempts"
)

// metaOf reads the event's metadata off a message. It fills in what it can
// even when it fails, for the dead letter.
func metaOf(msg *message.Message) (events.Meta, error) {
	m := events.Meta{
		Name:          msg.Metadata.Get(events.MetaEventName),
		AggregateType: msg.Metadata.Get(events.MetaAggregateType),
		AggregateID:   msg.Metadata.Get(events.MetaAggregateID),
		Headers:       map[string]string{},
	}
	for k, v := range msg.Metadata {
		if !strings.HasPrefix(k, events.ReservedPrefix) {
			m.Headers[k] = v
		}
	}
	if t, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(events.MetaCreatedAt)); err == nil {
		m.CreatedAt = t
	}
	var errs []string
	if why := msg.Metadata.Get(MetaMalformed); why != "" {
		errs = append(errs, why)
	}
	id, err := uuid.Parse(msg.UUID)
	if err != nil {
		errs = append(errs, fmt.Sprintf("message UUID %q is not an event id", msg.UUID))
	}
	m.EventID = id
	if m.Name == "" {
		errs = append(errs, "metadata "+events.MetaEventName+" is missing")
	}
	v, err := strconv.Atoi(msg.Metadata.Get(events.MetaEventVersion))
	if err != nil || v < 1 {
		errs = append(errs, fmt.Sprintf("metadata %s %q is not a version number", events.MetaEventVersion, msg.Metadata.Get(events.MetaEventVersion)))
	}
	m.Version = v
	if len(errs) > 0 {
		return m, errors.New("malformed message: " + strings.Join(errs, "; "))
	}
	return m, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// PanicError is the error a handler panic turns into: the transaction rolls
// back and the delivery is retried like any failure. errors.As finds it,
// with the value the handler panicked with.
type PanicError struct {
	Value any
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }
