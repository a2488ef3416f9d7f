// Package events no longer declares order.paid, whose version 1 is
// released in its lock.json (rule EVENT_KEPT).
package events

import (
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

type OrderShipped struct{ events.Schema }

func (OrderShipped) Name() string      { return "order.shipped" }
func (OrderShipped) Topic() string     { return "orders" }
func (OrderShipped) Aggregate() string { return "Order" }
func (OrderShipped) Versions() []events.Version {
	return []events.Version{events.V(1, field.Int64("order_id"), field.String("carrier"))}
}

var All = []events.Interface{OrderShipped{}}
