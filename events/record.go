package events

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// Record is an outbox row, or a scheduled event's, as tests and tools see
// it. The generated (*ent.Outbox).OutboxRecord returns one, and
// (*ent.ScheduledEvent).OutboxRecord with the time it is due.
type Record struct {
	EventID       uuid.UUID
	Name          string
	Version       int
	Topic         string
	AggregateType string
	AggregateID   string
	Payload       json.RawMessage
	Headers       map[string]string
	// DeliverAt is when a scheduled event is due (DeliverAt,
	// DeliverAfter), by the database's clock; zero for an event sent
	// at once.
	DeliverAt time.Time
	// CancelledAt is when Cancel stopped the scheduled event; nil when
	// it was not cancelled.
	CancelledAt *time.Time
}

// Payload is implemented by every generated payload struct: it names the
// event and version the struct is the shape of.
type Payload interface {
	OutboxEvent() (name string, version int)
}

// Defaulter is implemented by the pointer to a generated payload struct
// whose version declares defaults: OutboxSetDefaults sets them where the
// struct holds no value (a nil pointer, an empty string), as Emit does
// before writing it. A payload's JSON Schema refuses "" and null where
// they would stand for a default, so outboxtest.Message calls it to build
// what a producer writes.
type Defaulter interface {
	Payload
	OutboxSetDefaults()
}
