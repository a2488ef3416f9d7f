package events

import (
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/google/uuid"
)

// EmitOption adjusts one Emit call.
type EmitOption func(*EmitConfig)

// EmitConfig is the result of applying EmitOptions. Generated code reads it;
// users set it through the options.
type EmitConfig struct {
	// EventID is the stable id of the event. Zero means a new UUIDv7.
	EventID uuid.UUID
	// Headers travel with the event as message metadata (trace context,
	// correlation ids). Keys starting with "outbox_" are reserved; see
	// CheckHeader for what else Emit refuses.
	Headers map[string]string
	// IDTo, when set, receives the event id once Emit has accepted the
	// event (see ReturnEventID).
	IDTo *uuid.UUID
	// Version, when not zero, is the version Emit writes instead of the
	// latest (see AsVersion).
	Version int
	// Scheduled holds the event back until DeliverAt or, when that is
	// zero, the database's time at the Emit plus DeliverAfter (see
	// DeliverAt and DeliverAfter).
	Scheduled    bool
	DeliverAt    time.Time
	DeliverAfter time.Duration
	atGiven      bool // DeliverAt was given, a zero time too (refused)
}

// NewEmitConfig applies opts in order.
func NewEmitConfig(opts ...EmitOption) EmitConfig {
	var c EmitConfig
	for _, opt := range opts {
		opt(&c)
	}
	return c
}

// WithEventID sets the event id instead of a generated one. Use it to make a
// retried request emit the same event: the second Emit with the same id
// returns ErrDuplicateEventID and writes nothing.
func WithEventID(id uuid.UUID) EmitOption {
	return func(c *EmitConfig) { c.EventID = id }
}

// WithHeaders adds headers to the event; later values win.
func WithHeaders(h map[string]string) EmitOption {
	return func(c *EmitConfig) {
		if c.Headers == nil {
			c.Headers = make(map[string]string, len(h))
		}
		maps.Copy(c.Headers, h)
	}
}

// WithHeader adds one header to the event.
func WithHeader(key, value string) EmitOption {
	return WithHeaders(map[string]string{key: value})
}

// ReturnEventID stores the id of the emitted event in *id when Emit
// succeeds (and leaves it alone when Emit fails). Unlike WithEventID or
// Emitted it writes nothing early: the event is still held until the
// commit, and the id is the one it will have in the outbox and on the
// broker (the consumers' dedupe key).
func ReturnEventID(id *uuid.UUID) EmitOption {
	return func(c *EmitConfig) { c.IDTo = id }
}

// AsVersion makes Emit write version n of the event instead of the latest,
// to hold a producer back while its consumers are deployed: the generated
// Emit downcasts the payload (encodes the latest, decodes it as version n,
// validates it as version n).
//
// It is allowed only when consumers of version n can read the latest
// version (every step from n on is forward compatible); otherwise Emit
// fails with ErrVersionNotWritable, saying which step is not and what to do
// instead. And it writes version n only when nothing is lost: consumers of
// the latest version, reading the version n payload, must read back the
// payload as given. A field version n lacks must therefore hold what they
// fill in: its declared default (a number at 0 is a value, not the default),
// nothing for an optional field without one, or what the declaration's
// Upcast sets. Otherwise Emit fails with a *LossError naming the field.
// Either way nothing is written.
func AsVersion(n int) EmitOption {
	return func(c *EmitConfig) { c.Version = n }
}

// ErrVersionNotWritable is returned by Emit given AsVersion(n) when the
// event cannot be written as version n: n is not declared, or a step after
// it is not forward compatible, so consumers of version n could not read
// what the latest says. Nothing is written.
var ErrVersionNotWritable = errors.New("events: the event cannot be written as that version")

// LossError is returned by Emit given AsVersion(n) when version n cannot
// carry a value of the payload: consumers of the latest version, reading
// the version n payload, would read something else in Field (usually a
// field version n lacks, which they fill in with its default). Nothing is
// written.
type LossError struct {
	Event   string // wire name
	Version int    // the version asked for
	Latest  int
	Field   string // path from the payload's root: "currency", "lines[2].unit", `attributes["k"].value`
	Value   string // the value the payload holds, as JSON; "" when it has none
	ReadAs  string // what consumers of the latest version would read instead, as JSON; "" for nothing
}

func (e *LossError) Error() string {
	return fmt.Sprintf("events: %q cannot be written as version %d without loss: field %q holds %s, but consumers of version %d would read %s from the version %d payload; "+
		"set the field to what they would read, or emit version %d once its consumers are deployed",
		e.Event, e.Version, e.Field, jsonOrNothing(e.Value), e.Latest, jsonOrNothing(e.ReadAs), e.Version, e.Latest)
}

func jsonOrNothing(v string) string {
	if v == "" {
		return "nothing"
	}
	return v
}
