package consumer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/events"
)

// giveUp stores the delivery as a dead letter and acknowledges it; if the
// dead letter cannot be stored the delivery is nacked so nothing is lost.
// The broker topic comes first: once the row exists a redelivery is
// skipped, so a topic publish that failed after it would never be made.
// It logs the dead letter once it is stored (a failure is the nack's to
// report), at error level: DeadLetteredLog. A letter passed over waits,
// like the event would (turn), until it is its aggregate's next.
func (s *Set) giveUp(ctx context.Context, turn *gapWait, m events.Meta, topic string, msg *message.Message, reason string, attempts int, order letterOrder) error {
	d := DeadLetter{Meta: m, Payload: msg.Payload, Reason: reason, Attempts: attempts, order: order}
	if s.cfg.DeadLetterPublisher != nil {
		out := message.NewMessage(msg.UUID, msg.Payload)
		out.Metadata = maps.Clone(msg.Metadata)
		out.Metadata.Set(MetaDeadLetterReason, reason)
		out.Metadata.Set(MetaDeadLetterConsumer, m.Consumer)
		out.Metadata.Set(MetaDeadLetterAttempts, strconv.Itoa(attempts))
		if err := s.cfg.DeadLetterPublisher.Publish(s.cfg.DeadLetterTopic, out); err != nil {
			return fmt.Errorf("consumer: publishing dead letter %s to %s: %w", msg.UUID, s.cfg.DeadLetterTopic, err)
		}
	}
	for {
		err := s.deadLetter(ctx, d)
		var gap *OutOfOrderError
		if !errors.As(err, &gap) {
			if err != nil {
				return err
			}
			break
		}
		if err := s.waitTurn(ctx, turn, m, gap); err != nil {
			var missing *missingError
			if !errors.As(err, &missing) {
				return err
			}
			d.order, d.Reason = letterForMissing, missing.Error()+"; then: "+d.Reason
		}
	}
	s.cfg.Logger.Error(DeadLetteredLog, errors.New(d.Reason), watermill.LogFields{
		"event_id": msg.UUID, "consumer": m.Consumer, "topic": topic, "event_name": m.Name,
		"event_version": m.Version, "aggregate_type": m.AggregateType, "aggregate_id": m.AggregateID,
		"attempts": attempts})
	return nil
}

// DeadLetteredLog is the message a handler set logs, at error level, for
// each delivery it sent to the dead letters, with the reason as the error
// and the fields event_id, consumer, topic (as subscribed, else the
// event's declared topic with the prefix), event_name, event_version,
// aggregate_type, aggregate_id and attempts.
const DeadLetteredLog = "Event sent to the dead letters"

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
	if raw := msg.Metadata.Get(events.MetaAggregateSeq); raw != "" {
		seq, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || seq < 1 {
			errs = append(errs, fmt.Sprintf("metadata %s %q is not a positive number", events.MetaAggregateSeq, raw))
		}
		m.AggregateSeq = max(seq, 0)
	}
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
