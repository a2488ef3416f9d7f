package consumer

// Reading an event's metadata off a Watermill message.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/events"
)

// MetaMalformed is set by a broker's unmarshaler on a message it could
// only partly read (a NATS header key repeated, say), to why: the message
// is then dead-lettered with that reason instead of failing in the
// subscriber, where it would be neither acked nor nacked and come back
// for ever.
const MetaMalformed = events.ReservedPrefix + "malformed"

// metaOf reads the event's metadata off a message. It fills in what it can
// even when it fails, for the dead letter.
func metaOf(msg *message.Message) (events.Meta, error) {
	m := events.Meta{
		Name:          msg.Metadata.Get(events.MetaEventName),
		AggregateType: msg.Metadata.Get(events.MetaAggregateType),
		AggregateID:   msg.Metadata.Get(events.MetaAggregateID),
		Tenant:        msg.Metadata.Get(events.MetaTenant),
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
	if t, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(events.MetaDeliverAt)); err == nil {
		m.DeliverAt = t
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
