// Package events declares a version that drops a required field of the
// previous one, with no upcaster: a consumer of version 2 would receive
// version 1 payloads carrying a field it no longer knows, and someone must
// decide what becomes of it. Its lock.json has released no version yet:
// the lock of case versions, where order.paid is released, would refuse
// the edits of its versions first.
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
		events.V(1, field.Int64("order_id"), field.Int64("amount_cents"), field.String("card_last4")),
		events.V(2, field.Int64("order_id"), field.Int64("amount_cents")),
	}
}

var All = []events.Interface{OrderPaid{}}
