package events

import (
	"time"

	"github.com/google/uuid"
)

// Meta describes one delivery of an event to a consumer's handler.
type Meta struct {
	EventID       uuid.UUID
	Name          string // wire name
	Version       int    // the version the event was emitted with (the handler sees it upcast to the latest)
	Topic         string
	AggregateType string
	AggregateID   string
	// AggregateSeq is the event's place among its aggregate's events on
	// its topic (1, 2, 3...); 0 when its producer does not number them.
	AggregateSeq int64
	CreatedAt    time.Time // when the event was written; zero if the message did not say
	// DeliverAt is when a scheduled event (DeliverAt, DeliverAfter) was
	// due, by the database's clock; zero for an event sent at once.
	DeliverAt time.Time
	Headers   map[string]string
	Consumer  string // the consumer name the handler is registered under
	Attempt   int    // 1 for the first try of this delivery
}

// Upcaster is implemented by an event declaration whose versions cannot all
// be upcast automatically (a field removed, renamed or changed in kind, or a
// new required field without a default). Upcast turns the decoded JSON
// fields of version from into those of version from+1. The generator
// refuses a declaration that needs an upcaster and has none.
type Upcaster interface {
	Upcast(from int, fields map[string]any) (map[string]any, error)
}
