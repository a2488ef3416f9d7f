// Package events declares a version that drops an optional field, with no
// upcaster (rule FIELD_REMOVE_OPTIONAL): forward compatible, but the
// upcaster says what becomes of older payloads' values.
package events

import (
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

type NoteAdded struct{ events.Schema }

func (NoteAdded) Name() string      { return "note.added" }
func (NoteAdded) Topic() string     { return "notes" }
func (NoteAdded) Aggregate() string { return "Note" }
func (NoteAdded) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Int64("id"), field.String("author").Optional()),
		events.V(2, field.Int64("id")),
	}
}

var All = []events.Interface{NoteAdded{}}
