package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	entsql "entgo.io/ent/dialect/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/entoutbox/entoutbox/ent"
	outboxrow "github.com/entoutbox/entoutbox/ent/outbox"
	"github.com/entoutbox/entoutbox/ent/predicate"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/outbox"
	"github.com/entoutbox/entoutbox/schema"
)

// Range selects the delivered events to replay.
type Range struct {
	Events      []string  // event names; at least one
	Since       time.Time // written at or after; zero for no bound
	Until       time.Time // written before; zero for no bound
	AggregateID string    // one aggregate only; "" for all
}

// ReplayOptions say where replayed events go.
type ReplayOptions struct {
	// ToTopic sends every event to this topic instead of its own.
	ToTopic string
	// TopicPrefix is prepended to each event's own topic, as the relay's
	// --topic-prefix; not to ToTopic.
	TopicPrefix string
	// BatchSize is how many rows are read and published at a time
	// (default 500).
	BatchSize int
}

// Replay publishes the retained delivered events r selects to pub, with
// their original ids and the metadata the relay sends, in id order (the
// order they were written, so per aggregate in order), and returns how
// many it published. Events still pending are the relay's and left out.
// It stops at the first failed publish, returning how many went out
// before it.
func (a *Admin) Replay(ctx context.Context, pub message.Publisher, r Range, opts ReplayOptions) (int, error) {
	if len(r.Events) == 0 {
		return 0, errors.New("admin: replay needs at least one event name")
	}
	batch := opts.BatchSize
	if batch <= 0 {
		batch = 500
	}
	delivered, err := a.delivered(ctx)
	if err != nil {
		return 0, err
	}
	ps := []predicate.Outbox{outboxrow.EventNameIn(r.Events...), delivered}
	if !r.Since.IsZero() {
		ps = append(ps, outboxrow.CreatedAtGTE(r.Since))
	}
	if !r.Until.IsZero() {
		ps = append(ps, outboxrow.CreatedAtLT(r.Until))
	}
	if r.AggregateID != "" {
		ps = append(ps, outboxrow.AggregateIDEQ(r.AggregateID))
	}
	// Each event goes out under a publish id of this replay's own, so that a
	// broker that drops duplicates by message id (JetStream, within its
	// duplicate window) stores it; consumers still see its event id.
	replayID := time.Now().UnixNano()
	var sent int
	for after := int64(0); ; {
		rows, err := a.client.Outbox.Query().
			Where(append(ps, outboxrow.IDGT(after))...).
			Order(outboxrow.ByID()).Limit(batch).All(ctx)
		if err != nil {
			return sent, fmt.Errorf("admin: reading events to replay: %w", err)
		}
		// Consecutive events of one topic go in one Publish, which keeps
		// their order.
		for start := 0; start < len(rows); {
			topic := opts.topic(rows[start])
			end := start + 1
			for end < len(rows) && opts.topic(rows[end]) == topic {
				end++
			}
			msgs := make([]*message.Message, 0, end-start)
			for _, o := range rows[start:end] {
				msg := Message(o)
				msg.Metadata[events.MetaPublishID] = outbox.ReplayPublishID(o.EventID.String(), replayID)
				msgs = append(msgs, msg)
			}
			if err := pub.Publish(topic, msgs...); err != nil {
				return sent, fmt.Errorf("admin: publishing %d events to %q (after %d sent): %w", len(msgs), topic, sent, err)
			}
			sent += len(msgs)
			start = end
		}
		if len(rows) < batch {
			return sent, nil
		}
		after = rows[len(rows)-1].ID
	}
}

func (o ReplayOptions) topic(row *ent.Outbox) string {
	if o.ToTopic != "" {
		return o.ToTopic
	}
	return o.TopicPrefix + row.Topic
}

// Message is the message the relay publishes for outbox row o: the event
// id as its UUID, the payload, and as metadata the row's headers, the
// event name, version and aggregate, when it was written and the row's
// publish id (events.MetaPublishID).
func Message(o *ent.Outbox) *message.Message {
	msg := message.NewMessage(o.EventID.String(), message.Payload(o.Payload))
	msg.Metadata = outbox.Metadata(o.EventName, o.EventVersion, o.AggregateType, o.AggregateID, o.Headers)
	msg.Metadata[events.MetaCreatedAt] = o.CreatedAt.UTC().Format(time.RFC3339Nano)
	msg.Metadata[events.MetaPublishID] = outbox.PublishID(o.EventID.String(), o.ID)
	outbox.SetAggregateSeq(msg.Metadata, seqOf(o.AggregateSeq))
	if o.ReadableFrom != nil {
		outbox.SetReadableFrom(msg.Metadata, o.EventVersion, *o.ReadableFrom)
	}
	return msg
}

// delivered is the predicate of delivered rows: delivered_at is set, or
// the WAL path delivered them (it does not write delivered_at).
func (a *Admin) delivered(ctx context.Context) (predicate.Outbox, error) {
	d, err := outboxdb.New(schema.OutboxTable, "").ReadDelivery(ctx, a.client)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	if !d.WAL() {
		return outboxrow.DeliveredAtNotNil(), nil
	}
	return predicate.Outbox(func(s *entsql.Selector) {
		// s.C gives the column qualified as the query names the table.
		alias := strings.TrimSuffix(s.C(outboxrow.FieldID), `."`+outboxrow.FieldID+`"`)
		s.Where(entsql.ExprP(d.Delivered(alias)))
	}), nil
}
