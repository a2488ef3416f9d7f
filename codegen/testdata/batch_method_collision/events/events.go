// Package events declares two events whose generated methods collide:
// RegisterPaymentBatch is the batch handler method of Payment and the
// handler method of PaymentBatch.
package events

import (
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

type Payment struct{ events.Schema }

func (Payment) Name() string      { return "payment" }
func (Payment) Topic() string     { return "payments" }
func (Payment) Aggregate() string { return "Order" }
func (Payment) Versions() []events.Version {
	return []events.Version{events.V(1, field.Int64("order_id"))}
}

type PaymentBatch struct{ events.Schema }

func (PaymentBatch) Name() string      { return "payment.batch" }
func (PaymentBatch) Topic() string     { return "payments" }
func (PaymentBatch) Aggregate() string { return "Order" }
func (PaymentBatch) Versions() []events.Version {
	return []events.Version{events.V(1, field.Int64("order_id"))}
}

var All = []events.Interface{Payment{}, PaymentBatch{}}
