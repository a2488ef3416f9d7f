// Package schedschema is the golden cases' ent schema with the scheduled
// events' table: events may be held back until a time.
package schedschema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"

	"github.com/entoutbox/entoutbox/schema"
)

// Order is a business entity next to the outbox.
type Order struct{ ent.Schema }

// Fields of Order.
func (Order) Fields() []ent.Field {
	return []ent.Field{field.String("customer")}
}

// The outbox tables, the scheduled events among them.
type (
	Outbox         struct{ schema.Outbox }
	ProcessedEvent struct{ schema.ProcessedEvent }
	DeadLetter     struct{ schema.DeadLetter }
	ScheduledEvent struct{ schema.ScheduledEvent }
)

// All lists the schema types for the golden tests.
var All = []ent.Interface{Order{}, Outbox{}, ProcessedEvent{}, DeadLetter{}, ScheduledEvent{}}
