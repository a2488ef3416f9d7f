package engine

import (
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/outbox"
)

// What every read path does with a row, in one place: check what a broker
// cannot take (rows written by hand may hold anything), and turn it into
// the message that goes out. The message metadata is rebuilt from the
// columns by outbox.Metadata and outbox.DecodeHeaders, the writer's own
// wire format.

// Row is an outbox row as a read path read it.
type Row struct {
	ID            int64
	EventID       uuid.UUID
	Name          string
	Version       int
	Topic         string
	AggregateType string
	AggregateID   string
	Payload       []byte
	Headers       []byte
	ReadableFrom  int   // 0 when only consumers of version read it
	AggregateSeq  int64 // the row's aggregate_seq; 0 when NULL
	CreatedAt     time.Time
	Attempts      int
	Outages       int   // failed publishes in an outage (the WAL path counts them)
	Partition     int   // the fast path's
	Size          int64 // bytes of payload and headers, as MaxBytesInFlight counts them
	// Wait is how long until the row may be tried again (a retry backs
	// off); zero when it is due.
	Wait time.Duration

	decodedHeaders map[string]string // set once the row is checked
}

// Aggregate identifies an ordering key.
type Aggregate struct{ Type, ID string }

// Aggregate is the row's ordering key.
func (r *Row) Aggregate() Aggregate { return Aggregate{r.AggregateType, r.AggregateID} }

// Check decodes the row's headers (decodedHeaders) and finds what no
// broker can take: the row is then malformed, and goes to the dead letters
// as it is with the error as the reason.
func (r *Row) Check() error {
	h, err := outbox.DecodeHeaders(r.Headers)
	if err != nil {
		return err
	}
	r.decodedHeaders = h
	switch {
	case r.Name == "":
		return errors.New("event_name is empty")
	case r.Topic == "":
		return errors.New("topic is empty")
	case r.AggregateID == "":
		return errors.New("aggregate_id is empty")
	}
	return events.CheckAggregateID(r.AggregateID) // what Emit refuses
}

// MetaRowError is set on a message read from a row that cannot be relayed
// as it is; its value is the reason.
const MetaRowError = events.ReservedPrefix + "row_error"

// Attributes adds attributes of its own to the metadata of an event's
// message (the relay's CloudEvents attributes); nil adds none.
type Attributes func(md message.Metadata, eventID, name string, version int, createdAt time.Time)

// Message is the message of row r as every read path sends it, with the
// attributes attrs adds. Its topic is the row's (r.Topic), not in its
// metadata. r is checked (see Check), or its headers are left out. The
// message has no ack channels: the engine's publishing neither acks nor
// keeps it (a Watermill consumer needs them: see relay.Subscriber).
func (r *Row) Message(attrs Attributes) *message.Message {
	id := r.EventID.String()
	md := outbox.Metadata(r.Name, r.Version, r.AggregateType, r.AggregateID, r.decodedHeaders)
	outbox.SetReadableFrom(md, r.Version, r.ReadableFrom)
	md[events.MetaCreatedAt] = r.CreatedAt.UTC().Format(time.RFC3339Nano)
	md[events.MetaPublishID] = outbox.PublishID(id, r.ID)
	outbox.SetAggregateSeq(md, r.AggregateSeq)
	if attrs != nil {
		attrs(md, id, r.Name, r.Version, r.CreatedAt)
	}
	return &message.Message{UUID: id, Payload: r.Payload, Metadata: md}
}
