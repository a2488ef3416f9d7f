package consumer

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	entsql "entgo.io/ent/dialect/sql"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/entoutbox/entoutbox/consumer/internal/ordering"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// For generated code. AddToRouter adds Watermill handlers for each consumer
// name and topic to r, reading from subscribers made by newSubscriber for
// that consumer name (members of its consumer group on the broker):
// Config.Concurrency of them, so that as many messages are handled at once,
// each member taking one at a time; or one, for a subscriber that has many
// messages in flight itself (nats:// URLs, ?max_in_flight=). A newSubscriber that returns the same
// subscriber each time (not a new group member) gets one handler.
//
// Without positions in the application's schema (schema.ConsumerPosition)
// nothing keeps an aggregate's effects in order across instances: it says
// so at error level, and handles one message at a time per consumer name
// and topic, as before.
//
// It refuses, adding nothing, when a table the handlers write is missing
// (processed events, dead letters, and positions when the schema has
// them), naming it and what to run, as the relay does at start: else each
// message would fail on it, again and again.
func (s *Set) AddToRouter(r *message.Router, newSubscriber func(consumer string) (message.Subscriber, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.handlers) == 0 {
		return errors.New("consumer: no handler registered")
	}
	ctx, cancel := context.WithTimeout(context.Background(), schemaCheckTimeout)
	defer cancel()
	if err := s.checkSchema(ctx); err != nil {
		return err
	}
	concurrency := s.cfg.Concurrency
	if s.tables.Positions == "" {
		concurrency = 1
		s.cfg.Logger.Error("Consumers do not keep per-aggregate order: with two or more instances of a consumer name, "+
			"an aggregate's events may be applied out of order. Add the positions and sequences to the ent schema "+
			"(type ConsumerPosition struct{ schema.ConsumerPosition } and type AggregateSequence struct{ schema.AggregateSequence }), "+
			"then regenerate", errNoPositions, watermill.LogFields{"consumers": sortedKeys(s.handlers)})
	}
	for _, consumer := range sortedKeys(s.handlers) {
		subs, err := subscribers(consumer, concurrency, newSubscriber)
		if err != nil {
			return err
		}
		for i, sub := range subs {
			subs[i] = s.partitioned(consumer, sub)
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
				"consumer": consumer, "topic": full, "topic_prefix": s.cfg.TopicPrefix, "concurrency": len(subs)})
			for i, sub := range subs {
				name := consumer + "/" + full
				if i > 0 {
					name += "#" + strconv.Itoa(i+1) // router handler names are unique
				}
				slots := slotsOf(sub)
				r.AddConsumerHandler(name, full, sub, func(msg *message.Message) error {
					ctx, done := slotsFor(msg, slots).hold(msg.Context())
					defer done()
					return s.nackQuietly(msg, s.Handle(ctx, consumer, msg))
				})
			}
		}
	}
	return nil
}

// nackQuietly nacks msg itself when err is a delivery's wait for its
// turn that ended (normal flow: a predecessor in flight elsewhere, or
// back after a kill), logging it at debug level; the router would log it
// as a handler error, and a real stall would look like that noise
// (stall.go says when there is one). Other errors go to the router.
func (s *Set) nackQuietly(msg *message.Message, err error) error {
	var later *turnNack
	if !errors.As(err, &later) {
		return err
	}
	s.cfg.Logger.Debug("Delivery nacked, to come again: it waited for its aggregate's previous event",
		watermill.LogFields{"message_uuid": msg.UUID, "reason": err.Error(), "nack_delay": msg.Metadata.Get(events.MetaNackDelay)})
	msg.Nack()
	return nil // the router's ack after a nack does nothing
}

var errNoPositions = errors.New("the schema has no consumer positions")

// schemaCheckTimeout bounds the look for the tables at AddToRouter, which
// takes no context: a database that does not answer fails the start
// rather than hanging it.
const schemaCheckTimeout = time.Minute

// checkSchema returns an error naming the tables of s that do not exist in
// its database; nil for a set without one (NewSet), which writes none.
func (s *Set) checkSchema(ctx context.Context) error {
	if s.db == nil {
		return nil
	}
	var missing []string
	for _, t := range []struct{ what, name string }{
		{"processed-events", s.tables.Processed},
		{"dead-letter", s.tables.DeadLetters},
		{"consumer positions", s.tables.Positions},
	} {
		if t.name == "" {
			continue
		}
		var rows entsql.Rows
		catalog := outboxdb.Tables{Dialect: s.tables.Dialect}
		if err := outboxdb.Bound(s.db, catalog.Dialect).Query(ctx, catalog.TableExistsQuery(), []any{catalog.TableArg(t.name)}, &rows); err != nil {
			return fmt.Errorf("consumer: looking for the %s table %q: %w", t.what, t.name, err)
		}
		exists, err := ordering.ScanBool(&rows)
		if err != nil {
			return fmt.Errorf("consumer: looking for the %s table %q: %w", t.what, t.name, err)
		}
		if !exists {
			missing = append(missing, fmt.Sprintf("%s table %q", t.what, t.name))
		}
	}
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("consumer: the %s does not exist (%s)", missing[0], outboxdb.MigrateHint)
	}
	return fmt.Errorf("consumer: the %s do not exist (%s)", strings.Join(missing, ", "), outboxdb.MigrateHint)
}

// subscribers returns up to n subscribers of consumer's group, fewer when
// newSubscriber hands out the same one again, and one when it hands out
// one that has many messages in flight itself (a NATS pull subscriber:
// concurrentSubscriber).
func subscribers(consumer string, n int, newSubscriber func(string) (message.Subscriber, error)) ([]message.Subscriber, error) {
	var subs []message.Subscriber
	for range n {
		sub, err := newSubscriber(consumer)
		if err != nil {
			return nil, fmt.Errorf("consumer: subscriber for %q: %w", consumer, err)
		}
		if len(subs) > 0 && same(sub, subs[0]) {
			break // one subscriber for all: subscribing it again would deliver each message again
		}
		subs = append(subs, sub)
		if c, ok := sub.(concurrentSubscriber); ok && c.MaxInFlight() > 1 {
			if n == 1 {
				// One at a time, in order (no positions keep the order):
				// the subscriber must not hand out more.
				c.LimitInFlight(1)
			}
			break
		}
	}
	return subs, nil
}

// concurrentSubscriber is a subscriber that hands out up to MaxInFlight
// messages before the first is acknowledged (the router handles each in a
// goroutine of its own), where most Watermill subscribers wait for each
// one's ack: one such subscriber keeps the handler set's transactions full.
type concurrentSubscriber interface {
	MaxInFlight() int
	LimitInFlight(n int)
}

func same(a, b message.Subscriber) bool {
	ta := reflect.TypeOf(a)
	return ta == reflect.TypeOf(b) && ta.Comparable() && a == b
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
