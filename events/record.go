package events

import (
	"encoding/json"

	"github.com/google/uuid"
)

// Record is an outbox row as tests and tools see it. The generated
// (*ent.Outbox).OutboxRecord returns one.
type Record struct {
	EventID       uuid.UUID
	Name          string
	Version       int
	Topic         string
	AggregateType string
	AggregateID   string
	Payload       json.RawMessage
	Headers       map[string]string
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
