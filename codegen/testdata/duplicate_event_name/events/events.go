// Package events declares two events with the same wire name.
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
	return []events.Version{events.V(1, field.Int64("order_id"))}
}

type PaymentCaptured struct{ events.Schema }

func (PaymentCaptured) Name() string      { return "order.paid" }
func (PaymentCaptured) Topic() string     { return "payments" }
func (PaymentCaptured) Aggregate() string { return "Payment" }
func (PaymentCaptured) Versions() []events.Version {
	return []events.Version{events.V(1, field.Int64("payment_id"))}
}

var All = []events.Interface{OrderPaid{}, PaymentCaptured{}}
