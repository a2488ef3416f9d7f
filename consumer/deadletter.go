package consumer

// Dead letters: what a consumer gives up on is stored with why (and first
// published to a broker topic, when one is set); internal/letters writes
// the row, once per event and consumer, whatever the text it carries.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"

	"entgo.io/ent/dialect"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/entoutbox/entoutbox/consumer/internal/letters"
	"github.com/entoutbox/entoutbox/consumer/internal/ordering"
	"github.com/entoutbox/entoutbox/events"
)

// insertDeadLetter is InsertDeadLetter, writing aggregate_seq too when
// withSeq (tables generated before it have no such column), and running
// first, in the same transaction, what the letter does to the positions.
func insertDeadLetter(ctx context.Context, db dialect.ExecQuerier, table string, withSeq bool, d DeadLetter,
	positions func(context.Context, dialect.ExecQuerier) error) error {
	written, err := letters.Insert(ctx, db, table, withSeq,
		letters.Letter{Meta: d.Meta, Payload: d.Payload, Reason: d.Reason, Attempts: d.Attempts}, positions)
	if d.written != nil {
		*d.written = written
	}
	return err
}

// DeadLetter is an event a consumer gave up on, with why.
type DeadLetter struct {
	Meta     events.Meta // as far as the message told it
	Payload  []byte
	Reason   string
	Attempts int

	// What the letter does to its aggregate's position (internal/ordering).
	order ordering.LetterOrder
	// written, when set, is told whether a row was written: false when the
	// event had a letter of this consumer already (giveUp then logs and
	// counts nothing).
	written *bool
}

// giveUp stores the delivery as a dead letter and acknowledges it; if the
// dead letter cannot be stored the delivery is nacked so nothing is lost.
// The broker topic comes first: once the row exists a redelivery is
// skipped, so a topic publish that failed after it would never be made.
// It logs the dead letter once it is stored (a failure is the nack's to
// report), at error level: DeadLetteredLog; an event that has a letter of
// this consumer already (set aside before, and come again) writes none,
// and is neither logged nor counted again (written is false). A letter passed over waits,
// like the event would (turn), until it is its aggregate's next.
func (s *Set) giveUp(ctx context.Context, turn *gapWait, m events.Meta, topic string, msg *message.Message, reason string, attempts int,
	order ordering.LetterOrder) (written bool, err error) {
	written = true // a store that does not tell (a callback of its own) counts as written
	d := DeadLetter{Meta: m, Payload: msg.Payload, Reason: reason, Attempts: attempts, order: order, written: &written}
	if s.cfg.DeadLetterPublisher != nil {
		out := message.NewMessage(msg.UUID, msg.Payload)
		out.Metadata = maps.Clone(msg.Metadata)
		out.Metadata.Set(MetaDeadLetterReason, reason)
		out.Metadata.Set(MetaDeadLetterConsumer, m.Consumer)
		out.Metadata.Set(MetaDeadLetterAttempts, strconv.Itoa(attempts))
		if err := s.cfg.DeadLetterPublisher.Publish(s.cfg.DeadLetterTopic, out); err != nil {
			return false, fmt.Errorf("consumer: publishing dead letter %s to %s: %w", msg.UUID, s.cfg.DeadLetterTopic, err)
		}
	}
	for {
		err := s.deadLetter(ctx, d)
		var gap *OutOfOrderError
		if !errors.As(err, &gap) {
			if err != nil {
				return false, err
			}
			break
		}
		if err := s.waitTurn(ctx, turn, m, gap); err != nil {
			var missing *missingError
			if !errors.As(err, &missing) {
				return false, err
			}
			d.order, d.Reason = ordering.LetterForMissing, missing.Error()+"; then: "+d.Reason
		}
	}
	if !written {
		return false, nil // set aside before: that letter was logged and counted
	}
	s.cfg.Logger.Error(DeadLetteredLog, errors.New(d.Reason), watermill.LogFields{
		"event_id": msg.UUID, "consumer": m.Consumer, "topic": topic, "event_name": m.Name,
		"event_version": m.Version, "aggregate_type": m.AggregateType, "aggregate_id": m.AggregateID,
		"attempts": attempts})
	return true, nil
}

// DeadLetteredLog is the message a handler set logs, at error level, for
// each delivery it sent to the dead letters, with the reason as the error
// and the fields event_id, consumer, topic (as subscribed, else the
// event's declared topic with the prefix), event_name, event_version,
// aggregate_type, aggregate_id and attempts.
const DeadLetteredLog = "Event sent to the dead letters"

// Metadata set on dead letters published to a broker topic.
const (
	MetaDeadLetterReason   = events.ReservedPrefix + "dead_letter_reason"
	MetaDeadLetterConsumer = events.ReservedPrefix + "dead_letter_consumer"
	MetaDeadLetterAttempts = events.ReservedPrefix + "dead_letter_attempts"
)
