// Package schema is the ent schema of the orders example.
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"
	"github.com/entoutbox/entoutbox/schema"
)

// Order is a customer order.
type Order struct{ ent.Schema }

// Fields of the order.
func (Order) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.String("customer").NotEmpty(),
		field.Int64("amount_cents").Positive(),
		field.Enum("status").Values("PENDING", "PAID", "CANCELLED").Default("PENDING"),
	}
}

// The outbox tables, embedded from entoutbox.
type (
	Outbox            struct{ schema.Outbox }
	ProcessedEvent    struct{ schema.ProcessedEvent }
	DeadLetter        struct{ schema.DeadLetter }
	AggregateSequence struct{ schema.AggregateSequence }
	ConsumerPosition  struct{ schema.ConsumerPosition }
	ScheduledEvent    struct{ schema.ScheduledEvent }
)

// Invoice is the billing consumer's effect: one per paid order.
type Invoice struct{ ent.Schema }

// Fields of the invoice.
func (Invoice) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("order_id").Unique(),
		field.Int64("amount_cents"),
		field.String("currency"),
	}
}
