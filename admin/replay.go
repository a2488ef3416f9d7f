package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/outbox"
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
	// Limit bounds how many events are published: the first Limit in
	// order; 0 for all.
	Limit int
	// Tenant, when set, is put on every message as the relay of a fleet
	// puts it (events.MetaTenant): the tenant whose database this is, for
	// consumers that apply each event in its tenant's database.
	Tenant string
}

// Replay publishes the retained delivered events r selects to pub, with
// their original ids and the metadata the relay sends, in id order (the
// order they were written, so per aggregate in order), and returns how
// many it published. Events still pending are the relay's and left out;
// those the WAL path delivered (it sets no delivered_at) are in.
// It stops at the first failed publish, returning how many went out
// before it.
func (a *Admin) Replay(ctx context.Context, pub message.Publisher, r Range, opts ReplayOptions) (int, error) {
	switch {
	case a.tables.Dialect != outboxdb.Postgres:
		return 0, fmt.Errorf("admin: replay runs on PostgreSQL; on %s not yet", a.tables.Dialect)
	case len(r.Events) == 0:
		return 0, errors.New("admin: replay needs at least one event name")
	case !r.Since.IsZero() && !r.Until.IsZero() && !r.Until.After(r.Since):
		return 0, fmt.Errorf("admin: replay until %s is not after since %s: the range selects nothing",
			r.Until.UTC().Format(time.RFC3339Nano), r.Since.UTC().Format(time.RFC3339Nano))
	case opts.Limit < 0:
		return 0, fmt.Errorf("admin: replay limit %d is negative", opts.Limit)
	}
	batch := opts.BatchSize
	if batch <= 0 {
		batch = 500
	}
	delivery, err := a.tables.ReadDelivery(ctx, a.db)
	if err != nil {
		return 0, fmt.Errorf("admin: %w", err)
	}
	selected := outboxdb.DeliveredRange{Events: r.Events, Since: r.Since, Until: r.Until, AggregateID: r.AggregateID}
	// Each event goes out under a publish id of this replay's own, so that a
	// broker that drops duplicates by message id (JetStream, within its
	// duplicate window) stores it; consumers still see its event id.
	replayID := time.Now().UnixNano()
	var sent int
	for after := int64(0); ; {
		n := batch
		if opts.Limit > 0 {
			if sent >= opts.Limit {
				return sent, nil
			}
			n = min(n, opts.Limit-sent)
		}
		rows, err := a.tables.ReadDelivered(ctx, a.db, delivery, selected, after, n)
		if err != nil {
			return sent, fmt.Errorf("admin: reading events to replay: %w", err)
		}
		// Consecutive events of one topic go in one Publish, which keeps
		// their order.
		for start := 0; start < len(rows); {
			topic := opts.topic(rows[start].Topic)
			end := start + 1
			for end < len(rows) && opts.topic(rows[end].Topic) == topic {
				end++
			}
			msgs := make([]*message.Message, 0, end-start)
			for _, o := range rows[start:end] {
				msg, err := rowMessage(o)
				if err != nil {
					return sent, fmt.Errorf("admin: replaying outbox row %d: %w", o.ID, err)
				}
				msg.Metadata[events.MetaPublishID] = outbox.ReplayPublishID(o.EventID.String(), replayID)
				if opts.Tenant != "" {
					msg.Metadata[events.MetaTenant] = opts.Tenant
				}
				msgs = append(msgs, msg)
			}
			if err := pub.Publish(topic, msgs...); err != nil {
				return sent, fmt.Errorf("admin: publishing %d events to %q (after %d sent): %w", len(msgs), topic, sent, err)
			}
			sent += len(msgs)
			start = end
		}
		if len(rows) < n {
			return sent, nil
		}
		after = rows[len(rows)-1].ID
	}
}

func (o ReplayOptions) topic(own string) string {
	if o.ToTopic != "" {
		return o.ToTopic
	}
	return o.TopicPrefix + own
}

// rowMessage is the message the relay publishes for outbox row o: the
// event id as its UUID, the payload, and as metadata the row's headers,
// the event name, version and aggregate, when it was written and the
// row's publish id (events.MetaPublishID).
func rowMessage(o outboxdb.Row) (*message.Message, error) {
	var headers map[string]string
	if len(o.Headers) > 0 {
		if err := json.Unmarshal(o.Headers, &headers); err != nil {
			return nil, fmt.Errorf("its headers are not a JSON object of strings: %w", err)
		}
	}
	msg := message.NewMessage(o.EventID.String(), message.Payload(o.Payload))
	msg.Metadata = outbox.Metadata(o.EventName, o.EventVersion, o.AggregateType, o.AggregateID, headers)
	msg.Metadata[events.MetaCreatedAt] = o.CreatedAt.UTC().Format(time.RFC3339Nano)
	msg.Metadata[events.MetaPublishID] = outbox.PublishID(o.EventID.String(), o.ID)
	outbox.SetAggregateSeq(msg.Metadata, o.AggregateSeq)
	if o.ReadableFrom != 0 {
		outbox.SetReadableFrom(msg.Metadata, o.EventVersion, o.ReadableFrom)
	}
	return msg, nil
}
