// Package events takes the default of a required field away in version 2
// (rule DEFAULT_REMOVE): version 1's schema does not require the field, so
// a payload of version 1 may lack it, and version 2's consumers need an
// upcaster to fill it in.
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
		events.V(1, field.Int64("order_id"), field.String("currency").Default("EUR")),
		events.V(2, field.Int64("order_id"), field.String("currency")),
	}
}

var All = []events.Interface{OrderPaid{}}
