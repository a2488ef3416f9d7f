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
	// IsDraft is set by Draft: the version is not released yet, and its
	// shape may still change.
	IsDraft bool
}

// V declares version n of an event with the given fields, in order.
func V(n int, fields ...field.Field) Version {
	return Version{Number: n, Fields: fields}
}

// Draft marks a version as not released yet: go generate records it in
// the lock as a draft, and its shape may change from one generation to the
// next. Drafts are the newest versions of an event (no released version
// follows one). Remove the mark to release the version: from then on the
// lock holds its shape, and a change to it is refused.
//
//	events.V(3, field.Int64("order_id"), field.String("note").Optional()).Draft()
//
// Do not emit a draft in production: once a consumer stored it, its shape
// is a contract like any other.
func (v Version) Draft() Version {
	v.IsDraft = true
	return v
}
