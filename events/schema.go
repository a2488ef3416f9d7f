package events

import "github.com/entoutbox/entoutbox/events/field"

// Interface is what an event declaration implements. Embed Schema to get
// the optional methods.
type Interface interface {
	// Name is the stable wire name ("order.paid"). It is stored in every
	// outbox row and travels with every message; never change it.
	Name() string
	// Topic is the broker topic the event is relayed to.
	Topic() string
	// Aggregate is the type of entity the event is about ("Order"). Together
	// with the aggregate id given at emit time it is the ordering key.
	Aggregate() string
	// Versions lists the payload versions in order, numbered from 1.
	Versions() []Version
	// Comment documents the event in the generated code.
	Comment() string

	outboxEvent()
}

// Schema is embedded by every event declaration.
type Schema struct{}

// Comment returns no comment; override it to document the generated types.
func (Schema) Comment() string { return "" }

func (Schema) outboxEvent() {}

// Version is one numbered shape of an event's payload.
type Version struct {
	Number int
	Fields []field.Field
}

// V declares version n of an event with the given fields, in order.
func V(n int, fields ...field.Field) Version {
	return Version{Number: n, Fields: fields}
}
