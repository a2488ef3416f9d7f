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
func (s *Set) Handle(ctx context.Context, consumer string, msg *message.Message) error {
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
	m, metaErr := metaOf(msg)
	m.Consumer = consumer
	if n, _ := strconv.Atoi(msg.Metadata.Get(events.MetaDeliveryCount)); n > 1 {
		s.cfg.Metrics.Redelivered(consumer)
	}
	subscribed := message.SubscribeTopicFromCtx(ctx)
	if subscribed != "" {
		m.Topic = strings.TrimPrefix(subscribed, s.cfg.TopicPrefix)
	}
	typ, known := s.types[m.Name]
	event := metricsUnknownEvent // a label for what no declaration names
	if known {
		event = m.Name
		if m.Topic == "" {
			m.Topic = typ.Topic // called directly: the topic its aggregate's seq counts on
		}
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
	var turn gapWait // this delivery's wait for its aggregate's previous event
	// setAside stores a dead letter with its reason, counted under class
	// (a metrics.Reason constant).
	setAside := func(class, reason string, attempts int, d time.Duration, order ordering.LetterOrder) error {
		written, err := s.giveUp(ctx, &turn, m, destination, msg, reason, attempts, order)
		if err != nil {
			return err
		}
		if !written { // a letter of the event was stored, logged and counted before
			s.cfg.Metrics.Delivery(consumer, event, metrics.ResultDuplicate, d)
			return nil
		}
		deadLettered = reason
		s.cfg.Metrics.Delivery(consumer, event, metrics.ResultDeadLettered, d)
		s.cfg.Metrics.ConsumerDeadLettered(consumer, class)
		return nil
	}
	if metaErr != nil {
		return setAside(metrics.ReasonMalformed, metaErr.Error(), 0, 0, ordering.LetterFollows)
	}
	if !known {
		return setAside(metrics.ReasonUnknownEvent, fmt.Sprintf("unknown event %q (version %d): this code declares no such event",
			m.Name, m.Version), 0, 0, s.letterOrder())
	}
	s.mu.Lock()
	fn, inTx, many := s.handlers[consumer][m.Name], s.txHandlers[consumer][m.Name], s.manyHandlers[consumer][m.Name]
	s.mu.Unlock()
	passing := fn == nil // an event on the topic this consumer does not handle
	if passing {
		if !ordering.Ordered(s.tables, m) {
			return nil
		}
		fn = s.passUnhandled // it still takes its place in its aggregate's order
	}
	s.warnUnordered(m)
	if ordering.Ordered(s.tables, m) {
		defer s.turns.hold(m)()
	}
	var payload any
	if !passing {
		if payload, err = decode(typ, m, msg); err != nil {
			return setAside(metrics.ReasonMalformed, err.Error(), 0, 0, s.letterOrder())
		}
	}
	// The first try is made in a shared transaction, and again after each
	// wait for the aggregate's turn (the handler did not run); what the
	// batch does not apply takes the path below, with its own transaction.
	batched := s.batch != nil && (inTx != nil || passing)
	mayGo := false // its wait for its turn said it may go
	settled := 0   // positions settled past a discarded event (ordering.ErrSettle), a bound against a loop
	for attempt := 1; ; {
		m.Attempt = attempt
		started := time.Now()
		var err error
		if batched && attempt == 1 {
			it := &batching.Item{Ctx: events.WithCause(ctx, m), Meta: m, Payload: payload, Fn: inTx}
			if many != nil {
				it.Fn, it.Many = nil, many
			}
			switch s.batch.Do(it) {
			case batching.Applied:
				if !passing {
					s.cfg.Metrics.Delivery(consumer, event, metrics.ResultHandled, time.Since(started))
					s.cfg.Metrics.Handled(consumer, event, m.CreatedAt)
				}
				return nil
			case batching.Duplicate:
				if !passing {
					s.cfg.Metrics.Delivery(consumer, event, metrics.ResultDuplicate, time.Since(started))
				}
				return nil
			case batching.Failed:
				err = it.Err
			case batching.Alone:
				// Mostly an event whose predecessor is not applied yet: a
				// look at its position tells, without a transaction, and
				// it waits for its turn. Otherwise (its batch failed, or it
				// was refused again once its wait said it may go) it takes
				// the path alone, which applies it or tells why not.
				if ordering.Ordered(s.tables, m) && !mayGo {
					err = s.lookForGap(ctx, m)
				}
				if err == nil {
					err = fn(events.WithCause(ctx, m), payload, m)
				}
			}
		} else {
			err = fn(events.WithCause(ctx, m), payload, m)
		}
		took := time.Since(started)
		var gap *OutOfOrderError
		var held *HeldError
		switch {
		case err == nil:
			if !passing {
				s.cfg.Metrics.Delivery(consumer, event, metrics.ResultHandled, took)
				s.cfg.Metrics.Handled(consumer, event, m.CreatedAt)
			}
			return nil
		case errors.Is(err, ErrDuplicate) && passing:
			return nil
		case errors.Is(err, ErrDuplicate):
			s.cfg.Metrics.Delivery(consumer, event, metrics.ResultDuplicate, took)
			return nil
		case errors.As(err, &gap):
			if err := s.waitTurn(ctx, &turn, m, gap); err != nil {
				if moved, _ := s.settle(ctx, m); moved && ctx.Err() == nil {
					mayGo = true
					continue // the seq it waited for was discarded: skipped
				}
				var missing *missingError
				if errors.As(err, &missing) {
					return setAside(metrics.ReasonPreviousMissing, missing.Error(), 0, took, ordering.LetterForMissing)
				}
				return s.nackLater(ctx, msg, err)
			}
			mayGo = true
			continue // not an attempt: the handler did not run
		case errors.As(err, &held):
			back, err := s.heldComesBack(ctx, m, held)
			if err != nil {
				return err
			}
			if !back {
				return setAside(metrics.ReasonHeld, held.Error(), 0, took, ordering.LetterFollows)
			}
			if err := s.waitRelease(ctx, m, held); err != nil {
				return s.nackLater(ctx, msg, err)
			}
			continue // not an attempt: the handler did not run
		case errors.Is(err, ordering.ErrSettle):
			// The event its aggregate waits for was discarded: the
			// position moves past it, and this one tries again.
			if settled++; settled > 3 {
				return fmt.Errorf("consumer: %q: event %s (seq %d of aggregate %s/%s): %w; its position did not move past it; nacked, to come again",
					consumer, m.EventID, m.AggregateSeq, m.AggregateType, m.AggregateID, err)
			}
			if _, err := s.settle(ctx, m); err != nil {
				return err
			}
			mayGo = true
			continue // not an attempt: the handler did not run
		case errors.Is(err, ordering.ErrLetteredNext):
			if err := s.onPositions(ctx, s.holdOrPass(m)); err != nil {
				return err
			}
			s.cfg.Metrics.Delivery(consumer, event, metrics.ResultDuplicate, took)
			return nil
		}
		if s.breaker.outage(err) {
			return &OutageError{Consumer: consumer, Err: err} // not an attempt: Handle waits for the database
		}
		if attempt >= s.cfg.MaxAttempts {
			return setAside(metrics.ReasonMaxAttempts, err.Error(), attempt, took, s.letterOrder())
		}
		s.cfg.Metrics.Delivery(consumer, event, metrics.ResultRetried, took)
		s.cfg.Logger.Info("Handler failed, retrying", map[string]any{
			"consumer": consumer, "event_id": m.EventID, "attempt": attempt, "err": err.Error()})
		select {
		case <-ctx.Done():
			return fmt.Errorf("consumer: %q stopped while retrying event %s: %w", consumer, m.EventID, err)
		case <-time.After(s.cfg.backoff(attempt)):
		}
		attempt++
	}
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
