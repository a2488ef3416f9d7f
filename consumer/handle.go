package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"entgo.io/ent/dialect"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/trace"

	"github.com/entoutbox/entoutbox/consumer/internal/batching"
	"github.com/entoutbox/entoutbox/consumer/internal/ordering"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/metrics"
)

// For generated code. Handle runs one delivery of msg to consumer: decode
// and upcast, then up to MaxAttempts tries of the handler with backoff, then
// the dead letters. It returns an error only when the delivery must be
// retried by the broker (nacked): ctx ended during the backoff, a dead
// letter could not be stored, or the event waited GapWait for its
// aggregate's previous one. A message this consumer has no handler for is
// acknowledged.
//
// An event that comes before its aggregate's previous one was applied is
// not a failure: it waits (see wait.go), without using its attempts. One
// of an aggregate held behind a dead letter goes to the dead letters at
// once.
//
// The handler's ctx carries the event (events.WithCause), so that the
// events it emits carry causation and correlation ids, and, while tracing
// is on, the delivery's consumer span.
//
// A failure to reach the consumer's database is not the event's: it
// counts no attempt and writes no dead letter; the set pauses until the
// database answers (outage.go), and the delivery waits, then runs again,
// or is nacked with an *OutageError after a while, for the broker to
// deliver it again.
//
// A set made for tenants (NewTenantTxSet) hands the delivery to the set of
// the tenant the message names (tenants.go).
func (s *Set) Handle(ctx context.Context, consumer string, msg *message.Message) error {
	if s.tenants != nil {
		return s.tenants.handle(ctx, consumer, msg)
	}
	var waited time.Duration // in this delivery, for outages to end
	var cause error
	for {
		if err := s.breaker.wait(ctx, consumer, &waited, cause); err != nil {
			return err
		}
		err := s.handle(ctx, consumer, msg)
		var outage *OutageError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &outage):
			cause = outage.Err
		case s.breaker.outage(err):
			cause = err
		default:
			return err
		}
	}
}

// handle is one run of Handle, until an outage stops it: an
// *OutageError when a try of the handler met one.
func (s *Set) handle(ctx context.Context, consumer string, msg *message.Message) (err error) {
	d := s.newDelivery(consumer, msg, message.SubscribeTopicFromCtx(ctx))
	if tracer := s.tracer.Get(); tracer != nil {
		var span trace.Span
		ctx, span = startProcess(ctx, tracer, consumer, d.destination, msg)
		defer func() { endProcess(span, err, d.deadLettered) }()
	}
	if err, done := d.prepare(ctx); done {
		return err
	}
	if ordering.Ordered(s.tables, d.m) {
		defer s.turns.hold(d.m)()
	}
	if !d.passing {
		if d.payload, err = decode(d.typ, d.m, msg); err != nil {
			return d.setAside(ctx, metrics.ReasonMalformed, err.Error(), 0, 0, s.letterOrder())
		}
	}
	return d.tries(ctx)
}

// delivery is one run of a message through the handler set: what it is,
// its handler, and where its tries stand.
type delivery struct {
	s           *Set
	consumer    string
	msg         *message.Message
	m           events.Meta
	metaErr     error // the message's metadata is malformed
	typ         EventType
	known       bool   // a declared event
	event       string // the metrics label
	destination string // the topic as subscribed, or the event's own with the prefix

	fn      HandlerFunc
	inTx    TxHandlerFunc     // set when the handler writes in a transaction the set gives it
	many    *batching.Handler // set for a handler of many events at once
	passing bool              // an event on the topic the consumer does not handle
	payload any

	turn         gapWait // its wait for its aggregate's previous event
	deadLettered string  // the reason, for the span
	mayGo        bool    // its wait for its turn said it may go
	settled      int     // positions settled past a discarded event (ordering.ErrSettle), a bound against a loop
}

func (s *Set) newDelivery(consumer string, msg *message.Message, subscribed string) *delivery {
	d := &delivery{s: s, consumer: consumer, msg: msg, event: metricsUnknownEvent, destination: subscribed}
	d.m, d.metaErr = metaOf(msg)
	d.m.Consumer = consumer
	if n, _ := strconv.Atoi(msg.Metadata.Get(events.MetaDeliveryCount)); n > 1 {
		s.cfg.Metrics.Redelivered(consumer)
	}
	if subscribed != "" {
		d.m.Topic = strings.TrimPrefix(subscribed, s.cfg.TopicPrefix)
	}
	d.typ, d.known = s.types[d.m.Name]
	if d.known {
		d.event = d.m.Name
		if d.m.Topic == "" {
			d.m.Topic = d.typ.Topic // called directly: the topic its aggregate's seq counts on
		}
		if d.destination == "" {
			d.destination = s.cfg.TopicPrefix + d.typ.Topic
		}
	}
	return d
}

// prepare sets aside a malformed or undeclared message and finds the
// delivery's handler; done says the delivery ended (with err).
func (d *delivery) prepare(ctx context.Context) (err error, done bool) {
	s, m := d.s, d.m
	if d.metaErr != nil {
		return d.setAside(ctx, metrics.ReasonMalformed, d.metaErr.Error(), 0, 0, ordering.LetterFollows), true
	}
	if !d.known {
		return d.setAside(ctx, metrics.ReasonUnknownEvent, fmt.Sprintf("unknown event %q (version %d): this code declares no such event",
			m.Name, m.Version), 0, 0, s.letterOrder()), true
	}
	s.mu.Lock()
	d.fn, d.inTx, d.many = s.handlers[d.consumer][m.Name], s.txHandlers[d.consumer][m.Name], s.manyHandlers[d.consumer][m.Name]
	s.mu.Unlock()
	d.passing = d.fn == nil
	if d.passing {
		if !ordering.Ordered(s.tables, m) {
			return nil, true
		}
		d.fn = s.passUnhandled // it still takes its place in its aggregate's order
	}
	s.warnUnordered(m)
	return nil, false
}

// setAside stores a dead letter with its reason, counted under class
// (a metrics.Reason constant).
func (d *delivery) setAside(ctx context.Context, class, reason string, attempts int, took time.Duration, order ordering.LetterOrder) error {
	s := d.s
	written, err := s.giveUp(ctx, &d.turn, d.m, d.destination, d.msg, reason, attempts, order)
	if err != nil {
		return err
	}
	if !written { // a letter of the event was stored, logged and counted before
		s.cfg.Metrics.Delivery(d.consumer, d.event, metrics.ResultDuplicate, took)
		return nil
	}
	d.deadLettered = reason
	s.cfg.Metrics.Delivery(d.consumer, d.event, metrics.ResultDeadLettered, took)
	s.cfg.Metrics.ConsumerDeadLettered(d.consumer, class)
	return nil
}

// tries runs the handler until it is applied, a duplicate, set aside or
// nacked: up to MaxAttempts tries with backoff; a wait for the
// aggregate's turn is not an attempt (the handler did not run).
func (d *delivery) tries(ctx context.Context) error {
	s := d.s
	for attempt := 1; ; {
		d.m.Attempt = attempt
		started := time.Now()
		err := d.try(ctx, attempt)
		took := time.Since(started)
		if err, done, again := d.outcome(ctx, err, took); done {
			return err
		} else if again {
			continue
		}
		if s.breaker.outage(err) {
			return &OutageError{Consumer: d.consumer, Err: err} // not an attempt: Handle waits for the database
		}
		if attempt >= s.cfg.MaxAttempts {
			return d.setAside(ctx, metrics.ReasonMaxAttempts, err.Error(), attempt, took, s.letterOrder())
		}
		s.cfg.Metrics.Delivery(d.consumer, d.event, metrics.ResultRetried, took)
		s.cfg.Logger.Info("Handler failed, retrying", map[string]any{
			"consumer": d.consumer, "event_id": d.m.EventID, "attempt": attempt, "err": err.Error()})
		select {
		case <-ctx.Done():
			return fmt.Errorf("consumer: %q stopped while retrying event %s: %w", d.consumer, d.m.EventID, err)
		case <-time.After(s.cfg.backoff(attempt)):
		}
		attempt++
	}
}

// try runs the handler once. The first try is made in a shared
// transaction, and again after each wait for the aggregate's turn (the
// handler did not run); what the batch does not apply takes the path
// alone, with its own transaction.
func (d *delivery) try(ctx context.Context, attempt int) error {
	s, m := d.s, d.m
	if s.batch == nil || d.inTx == nil && !d.passing || attempt > 1 {
		return d.fn(events.WithCause(ctx, m), d.payload, m)
	}
	it := &batching.Item{Ctx: events.WithCause(ctx, m), Meta: m, Payload: d.payload, Fn: d.inTx}
	if d.many != nil {
		it.Fn, it.Many = nil, d.many
	}
	switch s.batch.Do(it) {
	case batching.Applied:
		return nil
	case batching.Duplicate:
		return ErrDuplicate
	case batching.Failed:
		return it.Err
	}
	// Alone: mostly an event whose predecessor is not applied yet: a look
	// at its position tells, without a transaction, and it waits for its
	// turn. Otherwise (its batch failed, or it was refused again once its
	// wait said it may go) it takes the path alone, which applies it or
	// tells why not.
	if ordering.Ordered(s.tables, m) && !d.mayGo {
		if err := s.lookForGap(ctx, m); err != nil {
			return err
		}
	}
	return d.fn(events.WithCause(ctx, m), d.payload, m)
}

// outcome acts on what a try returned: done when the delivery ends (with
// the error to return), again when it tries once more without counting an
// attempt (it waited for its turn, or its position was settled); neither
// for a handler failure.
func (d *delivery) outcome(ctx context.Context, err error, took time.Duration) (_ error, done, again bool) {
	s, m := d.s, d.m
	var gap *OutOfOrderError
	var held *HeldError
	switch {
	case err == nil:
		if !d.passing {
			s.cfg.Metrics.Delivery(d.consumer, d.event, metrics.ResultHandled, took)
			s.cfg.Metrics.Handled(d.consumer, d.event, m.CreatedAt)
		}
		return nil, true, false
	case errors.Is(err, ErrDuplicate):
		if !d.passing {
			s.cfg.Metrics.Delivery(d.consumer, d.event, metrics.ResultDuplicate, took)
		}
		return nil, true, false
	case errors.As(err, &gap):
		return d.waitGap(ctx, gap, took)
	case errors.As(err, &held):
		back, err := s.heldComesBack(ctx, m, held)
		if err != nil {
			return err, true, false
		}
		if !back {
			return d.setAside(ctx, metrics.ReasonHeld, held.Error(), 0, took, ordering.LetterFollows), true, false
		}
		if err := s.waitRelease(ctx, m, held); err != nil {
			return s.nackLater(ctx, d.msg, err), true, false
		}
		return nil, false, true
	case errors.Is(err, ordering.ErrSettle):
		// The event its aggregate waits for was discarded: the position
		// moves past it, and this one tries again.
		if d.settled++; d.settled > 3 {
			return fmt.Errorf("consumer: %q: event %s (seq %d of aggregate %s/%s): %w; its position did not move past it; nacked, to come again",
				d.consumer, m.EventID, m.AggregateSeq, m.AggregateType, m.AggregateID, err), true, false
		}
		if _, err := s.settle(ctx, m); err != nil {
			return err, true, false
		}
		d.mayGo = true
		return nil, false, true
	case errors.Is(err, ordering.ErrLetteredNext):
		if err := s.onPositions(ctx, s.holdOrPass(m)); err != nil {
			return err, true, false
		}
		s.cfg.Metrics.Delivery(d.consumer, d.event, metrics.ResultDuplicate, took)
		return nil, true, false
	}
	return err, false, false
}

// waitGap waits for the turn of an event whose predecessor is not
// applied yet, as outcome says.
func (d *delivery) waitGap(ctx context.Context, gap *OutOfOrderError, took time.Duration) (_ error, done, again bool) {
	s, m := d.s, d.m
	if err := s.waitTurn(ctx, &d.turn, m, gap); err != nil {
		if moved, _ := s.settle(ctx, m); moved && ctx.Err() == nil {
			d.mayGo = true
			return nil, false, true // the seq it waited for was discarded: skipped
		}
		var missing *missingError
		if errors.As(err, &missing) {
			return d.setAside(ctx, metrics.ReasonPreviousMissing, missing.Error(), 0, took, ordering.LetterForMissing), true, false
		}
		return s.nackLater(ctx, d.msg, err), true, false
	}
	d.mayGo = true
	return nil, false, true
}

// settle moves m's aggregate's position past the events whose dead
// letters were discarded, in a transaction of its own (internal/ordering), and
// tells whether it moved.
func (s *Set) settle(ctx context.Context, m events.Meta) (moved bool, err error) {
	err = s.onPositions(ctx, func(ctx context.Context, db dialect.ExecQuerier, t Tables) (err error) {
		moved, err = ordering.SettleAlone(ctx, db, t, m)
		return err
	})
	return moved, err
}

// passUnhandled is the handler of an event with a seq that the consumer
// has no handler for: it moves the position past it.
func (s *Set) passUnhandled(ctx context.Context, _ any, m events.Meta) error {
	var passed bool
	err := s.onPositions(ctx, func(ctx context.Context, db dialect.ExecQuerier, t Tables) error {
		return ordering.InTx(ctx, db, func(ctx context.Context, tx dialect.ExecQuerier) (err error) {
			passed, err = ordering.PassUnhandled(ctx, tx, t, m)
			return err
		})
	})
	switch {
	case err != nil:
		return err
	case !passed:
		return ErrDuplicate
	}
	s.turns.applied(m)
	return nil
}

// ordering.LetterOrder is what a dead letter of an event of the aggregate's turn
// does to its aggregate.
func (s *Set) letterOrder() ordering.LetterOrder {
	if s.cfg.PassOverDeadLetters {
		return ordering.LetterPassed
	}
	return ordering.LetterHolds
}

// warnUnordered says once, at error level, that a consumer with positions
// receives events without a seq: their producer does not number them, and
// their order is not kept.
func (s *Set) warnUnordered(m events.Meta) {
	if s.tables.Positions == "" || m.AggregateSeq > 0 || s.warnedUnordered.Swap(true) {
		return
	}
	s.cfg.Logger.Error("Events without "+events.MetaAggregateSeq+": their order is not kept, across instances or within one "+
		"(Concurrency). Their producer does not number its events: add type AggregateSequence struct{ schema.AggregateSequence } "+
		"to its ent schema and regenerate", errors.New("event without a seq"), watermill.LogFields{
		"consumer": m.Consumer, "event_name": m.Name, "event_id": m.EventID, "topic": m.Topic})
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

// ErrDuplicate is returned by a generated handler when the consumer has
// already processed the event: the delivery is acknowledged and skipped.
var ErrDuplicate = errors.New("consumer: event already processed by this consumer")

// PanicError is the error a handler panic turns into: the transaction rolls
// back and the delivery is retried like any failure. errors.As finds it,
// with the value the handler panicked with.
type PanicError = batching.PanicError
