// Package noschema is an ent schema that forgot the outbox table.
package noschema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"
)

// Order is a business entity without an outbox next to it.
type Order struct{ ent.Schema }

// Fields of Order.
func (Order) Fields() []ent.Field {
	return []ent.Field{field.String("customer")}
}

// All lists the schema types for the golden tests.
var All = []ent.Interface{Order{}}
