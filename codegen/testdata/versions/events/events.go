// Package events declares an event with three versions next to a
// single-version one.
package events

import (
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

// OrderPaid is published when payment for an order is captured.
type OrderPaid struct{ events.Schema }

func (OrderPaid) Name() string      { return "order.paid" }
func (OrderPaid) Topic() string     { return "orders" }
func (OrderPaid) Aggregate() string { return "Order" }
func (OrderPaid) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Int64("order_id"), field.Int64("amount_cents")),
		events.V(2, field.Int64("order_id"), field.Int64("amount_cents"),
			field.String("currency").Default("EUR")),
		events.V(3, field.Int64("order_id"), field.Int64("amount_cents"),
			field.String("currency").Default("EUR"), field.Int("installments").Default(1)),
	}
}

// OrderShipped is published when an order leaves the warehouse.
type OrderShipped struct{ events.Schema }

func (OrderShipped) Name() string      { return "order.shipped" }
func (OrderShipped) Topic() string     { return "orders" }
func (OrderShipped) Aggregate() string { return "Order" }
func (OrderShipped) Versions() []events.Version {
	return []events.Version{events.V(1, field.Int64("order_id"), field.String("carrier"))}
}

// All lists the declarations of this case.
var All = []events.Interface{OrderPaid{}, OrderShipped{}}
