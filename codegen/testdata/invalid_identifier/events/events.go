// Package events declares names that are not valid identifiers.
package events

import (
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

type OrderPaid struct{ events.Schema }

func (OrderPaid) Name() string      { return "order paid!" }
func (OrderPaid) Topic() string     { return "orders/eu" }
func (OrderPaid) Aggregate() string { return "sales order" }
func (OrderPaid) Versions() []events.Version {
	return []events.Version{events.V(1, field.Int64("order-id"), field.String("2fa"), field.String("ok_name"))}
}

var All = []events.Interface{OrderPaid{}}
