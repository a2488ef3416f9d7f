// Package events declares versions out of order, and an event without any.
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
		events.V(1, field.Int64("order_id")),
		events.V(3, field.Int64("order_id"), field.String("currency")),
	}
}

type OrderShipped struct{ events.Schema }

func (OrderShipped) Name() string               { return "order.shipped" }
func (OrderShipped) Topic() string              { return "orders" }
func (OrderShipped) Aggregate() string          { return "Order" }
func (OrderShipped) Versions() []events.Version { return nil }

var All = []events.Interface{OrderPaid{}, OrderShipped{}}
