// Package events declares order.paid, whose entries its lock.json marks
// retired (rule EVENT_RETIRED).
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
	}
}

var All = []events.Interface{OrderPaid{}}
