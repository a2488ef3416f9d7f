package outbox

import (
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/events"
)

// Event is one event to write to the outbox, as the generated Emit methods
// hand it over: the payload is already validated and encoded.
type Event struct {
	Name          string
	Version       int
	Topic         string
	AggregateType string
	AggregateID   string
	Payload       []byte // JSON
	// ReadableFrom is the oldest version whose consumers can read Payload
	// as theirs (every step from it to Version is forward compatible); 0 or
	// Version when only consumers of Version can. The generator computes it.
	ReadableFrom int
	// MaxDelay is how far ahead the event may be scheduled (the
	// declaration's MaxDelay); 0 when it may not be.
	MaxDelay time.Duration
}

// Row is an outbox row as the writer inserts it: an event, its id, and the
// headers given at Emit. Everything the relay puts on a message comes from
// these columns (see Metadata).
type Row struct {
	EventID uuid.UUID
	Event
	Headers map[string]string
	// AggregateSeq is the row's place in its aggregate's order on its
	// topic when it is written again with the number it had (a dead
	// letter retried); 0 when it has none, or a sequenced Batch numbers it.
	AggregateSeq int64
	// Scheduled rows go to the scheduled events until they are due: at
	// DeliverAt, or when it is zero at the database's time of the write
	// plus DeliverAfter.
	Scheduled    bool
	DeliverAt    time.Time
	DeliverAfter time.Duration
}

// newRow checks ev and cfg, whose EventID is set, and builds their row.
// What a broker cannot carry is refused now, not retried by the relay
// until it gives up; a NUL or invalid UTF-8 would fail the commit.
func newRow(ev Event, cfg events.EmitConfig) (Row, error) {
	invalid := func(reason string) error {
		return &events.ValidationError{Event: ev.Name, Version: ev.Version, Reason: reason}
	}
	if err := events.CheckAggregateID(ev.AggregateID); err != nil {
		return Row{}, invalid(reason(err))
	}
	// PostgreSQL's jsonb refuses \u0000; found now, not when the events
	// are written at commit.
	if hasJSONNul(ev.Payload) {
		return Row{}, invalid(`payload holds a NUL character (\u0000), which PostgreSQL's jsonb cannot store`)
	}
	if err := events.CheckHeaders(cfg.Headers); err != nil { // the reserved prefix included
		return Row{}, invalid(reason(err))
	}
	if err := events.CheckSchedule(cfg, ev.MaxDelay, time.Now()); err != nil {
		return Row{}, invalid(reason(err))
	}
	return Row{EventID: cfg.EventID, Event: ev, Headers: cfg.Headers,
		Scheduled: cfg.Scheduled, DeliverAt: cfg.DeliverAt, DeliverAfter: cfg.DeliverAfter}, nil
}

// For generated code. AggregateIDOf is id as Emit of event name (version)
// writes it (events.FormatAggregateID), or an *events.ValidationError
// naming the event and id's Go type.
func AggregateIDOf(name string, version int, id events.AggregateID) (string, error) {
	s, err := events.FormatAggregateID(id)
	if err != nil {
		return "", &events.ValidationError{Event: name, Version: version, Reason: reason(err)}
	}
	return s, nil
}

// reason is the text of an error of events' checks without the package
// prefix, for the *events.ValidationError that names the event.
func reason(err error) string { return strings.TrimPrefix(err.Error(), "events: ") }

// hasJSONNul tells whether JSON text b has the escape \u0000 (and not an
// escaped backslash followed by "u0000").
func hasJSONNul(b []byte) bool {
	for i := 0; i+6 <= len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if string(b[i+1:i+6]) == "u0000" {
			return true
		}
		i++ // skip the escaped character
	}
	return false
}

// NewMessage builds the Watermill message the relay publishes for ev: the
// event id (cfg's, or a new UUIDv7) as UUID, the payload, and the headers
// plus the outbox metadata. Tests use it to hand consumers what the relay
// would.
func NewMessage(ev Event, cfg events.EmitConfig) (*message.Message, error) {
	if cfg.EventID == uuid.Nil {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("outbox: generating event id: %w", err)
		}
		cfg.EventID = id
	}
	r, err := newRow(ev, cfg)
	if err != nil {
		return nil, err
	}
	msg := message.NewMessage(r.EventID.String(), r.Payload)
	msg.Metadata = Metadata(r.Name, r.Version, r.AggregateType, r.AggregateID, r.Headers)
	SetReadableFrom(msg.Metadata, r.Version, r.ReadableFrom)
	return msg, nil
}
