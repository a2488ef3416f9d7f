// Package events declares defaults longer than their field's MaxLen, and an
// enum value that MaxLen would always refuse.
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
		events.V(2, field.Int64("order_id"),
			field.String("currency").MaxLen(3).Default("EURO"),
			field.Enum("channel").Values("web", "phone").MaxLen(5).Default("web"),
			field.Enum("region").Values("eu", "north-america").MaxLen(4).Default("eu")),
	}
}

var All = []events.Interface{OrderPaid{}}
