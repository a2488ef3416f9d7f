package relay

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

// row is an outbox row as a read path read it.
type row struct {
	id            int64
	eventID       uuid.UUID
	name          string
	version       int
	topic         string
	aggregateType string
	aggregateID   string
	payload       []byte
	headers       []byte
	readableFrom  int   // 0 when only consumers of version read it
	aggregateSeq  int64 // the row's aggregate_seq; 0 when NULL
	createdAt     time.Time
	attempts      int
	outages       int   // failed publishes in an outage (the WAL path counts them)
	partition     int   // the fast path's
	size          int64 // bytes of payload and headers, as MaxBytesInFlight counts them
	// wait is how long until the row may be tried again (a retry backs
	// off); zero when it is due.
	wait time.Duration

	decodedHeaders map[string]string // set once the row is checked
}

// aggregate identifies an ordering key.
type aggregate struct{ typ, id string }

func (r *row) aggregate() aggregate { return aggregate{r.aggregateType, r.aggregateID} }

// check decodes the row's headers (decodedHeaders) and finds what no
// broker can take: the row is then malformed, and goes to the dead letters
// as it is with the error as the reason.
func (r *row) check() error {
	h, err := outbox.DecodeHeaders(r.headers)
	if err != nil {
		return err
	}
	r.decodedHeaders = h
	switch {
	case r.name == "":
		return errors.New("event_name is empty")
	case r.topic == "":
		return errors.New("topic is empty")
	case r.aggregateID == "":
		return errors.New("aggregate_id is empty")
	}
	return events.CheckAggregateID(r.aggregateID) // what Emit refuses
}

// MetaRowError is set on a message read from a row that cannot be relayed
// as it is; its value is the reason.
const MetaRowError = events.ReservedPrefix + "row_error"

// message is the message of row r as every read path sends it, the
// CloudEvents attributes of ce included (none when nil); MetaTopic carries
// the row's topic to the publisher. r is checked (see check), or its
// headers are left out. The message has no ack channels: the relay's
// publishing neither acks nor keeps it (a Watermill consumer's needs them:
// see Subscriber).
func (r *row) message(ce *CloudEvents) *message.Message {
	id := r.eventID.String()
	md := outbox.Metadata(r.name, r.version, r.aggregateType, r.aggregateID, r.decodedHeaders)
	outbox.SetReadableFrom(md, r.version, r.readableFrom)
	md[events.MetaCreatedAt] = r.createdAt.UTC().Format(time.RFC3339Nano)
	md[events.MetaPublishID] = outbox.PublishID(id, r.id)
	outbox.SetAggregateSeq(md, r.aggregateSeq)
	md[MetaTopic] = r.topic
	ce.set(md, id, r.name, r.version, r.createdAt)
	return &message.Message{UUID: id, Payload: r.payload, Metadata: md}
}
