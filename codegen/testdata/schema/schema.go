// Package schema is the ent schema shared by the generator's golden cases.
package schema

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

// The outbox tables.
type (
	Outbox         struct{ schema.Outbox }
	ProcessedEvent struct{ schema.ProcessedEvent }
	DeadLetter     struct{ schema.DeadLetter }
)

// All lists the schema types for the golden tests.
var All = []ent.Interface{Order{}, Outbox{}, ProcessedEvent{}, DeadLetter{}}
