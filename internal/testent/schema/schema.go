// Package schema is the ent schema the library's own tests run against.
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"

	"github.com/entoutbox/entoutbox/schema"
)

// Order is a business row written next to the events.
type Order struct{ ent.Schema }

// Fields of Order.
func (Order) Fields() []ent.Field {
	return []ent.Field{field.Int64("id"), field.String("customer"), field.Int64("amount_cents")}
}

// The outbox tables.
type (
	Outbox            struct{ schema.Outbox }
	ProcessedEvent    struct{ schema.ProcessedEvent }
	DeadLetter        struct{ schema.DeadLetter }
	AggregateSequence struct{ schema.AggregateSequence }
	ConsumerPosition  struct{ schema.ConsumerPosition }
	ScheduledEvent    struct{ schema.ScheduledEvent }
)

// Invoice is the effect the consumer tests write.
type Invoice struct{ ent.Schema }

// Fields of Invoice.
func (Invoice) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("order_id"),
		field.Int64("amount_cents"),
		field.String("currency"),
		field.String("consumer"),
	}
}
