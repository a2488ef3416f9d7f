// Package events edits version 1, released in its lock.json (rule
// VERSION_FROZEN): each change is refused, naming its field.
package events

import (
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

type OrderPaid struct{ events.Schema }

func (OrderPaid) Name() string      { return "order.paid" }
func (OrderPaid) Topic() string     { return "orders" }
func (OrderPaid) Aggregate() string { return "Order" }
func (OrderPaid) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Int64("order_id"), field.String("amount_cents"), field.Enum("currency").Values("EUR", "USD", "GBP"),
			field.Int("installments").Min(1), field.String("note").Optional()),
	}
}

var All = []events.Interface{OrderPaid{}}
