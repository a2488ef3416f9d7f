// Package events declares duplicate fields: the same name twice, and two
// names with the same Go name.
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
		events.V(1, field.Int64("order_id"), field.Int64("amount_cents")),
		events.V(2, field.Int64("order_id"), field.Int64("amount_cents"), field.String("amount_cents"),
			field.Int64("Order_id")),
	}
}

var All = []events.Interface{OrderPaid{}}
