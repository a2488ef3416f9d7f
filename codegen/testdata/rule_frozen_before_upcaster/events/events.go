// Package events renames a field of version 1, released in its lock.json
// while version 2 exists (rule VERSION_FROZEN). The rename also makes the
// step 1 -> 2 look as if it needed an upcaster, but the fix is to restore
// version 1: the frozen version is refused first, naming the field, and
// the step it touches asks for no upcaster. An upcaster a step of versions
// the lock does not refuse needs is still asked for, after the lock's
// refusals.
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
		events.V(1, field.Int64("order_id"), field.Int64("amount")), // was amount_cents
		events.V(2, field.Int64("order_id"), field.Int64("amount_cents"),
			field.String("currency").Default("EUR")),
	}
}

// PriceChanged is not in the lock yet; its step 1 -> 2 needs an upcaster.
type PriceChanged struct{ events.Schema }

func (PriceChanged) Name() string      { return "price.changed" }
func (PriceChanged) Topic() string     { return "catalog" }
func (PriceChanged) Aggregate() string { return "Product" }
func (PriceChanged) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.String("sku"), field.Int64("cents")),
		events.V(2, field.String("sku"), field.String("cents")),
	}
}

var All = []events.Interface{PriceChanged{}, OrderPaid{}}
