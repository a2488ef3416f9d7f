// Package events declares UpcastSteps that do not match the steps needing
// an upcaster: a step left out (2 -> 3 adds a required field without a
// default), a step defaults fill in, and a step that does not exist.
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
		events.V(1, field.Int64("order_id"), field.Int64("cents")),
		events.V(2, field.Int64("order_id"), field.Int64("amount_cents")),
		events.V(3, field.Int64("order_id"), field.Int64("amount_cents"), field.String("region")),
	}
}

func (OrderPaid) Upcast(from int, fields map[string]any) (map[string]any, error) { return fields, nil }
func (OrderPaid) UpcastSteps() []int                                             { return []int{1} }

type OrderShipped struct{ events.Schema }

func (OrderShipped) Name() string      { return "order.shipped" }
func (OrderShipped) Topic() string     { return "orders" }
func (OrderShipped) Aggregate() string { return "Order" }
func (OrderShipped) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Int64("order_id")),
		events.V(2, field.Int64("order_id"), field.String("carrier").Default("post")),
		events.V(3, field.Int64("order_id"), field.String("carrier").Default("post"), field.String("tracking")),
	}
}

func (OrderShipped) Upcast(from int, fields map[string]any) (map[string]any, error) {
	return fields, nil
}
func (OrderShipped) UpcastSteps() []int { return []int{1, 2, 3} }

var All = []events.Interface{OrderPaid{}, OrderShipped{}}
