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
