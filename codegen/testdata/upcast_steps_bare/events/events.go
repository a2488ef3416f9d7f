// Package events adds version 3, with a new required field and no default,
// to an event whose bare Upcast (no UpcastSteps) was written for 1 -> 2,
// released in its lock.json: once two steps need an upcaster, the
// declaration must say which its Upcast handles.
package events

import (
	"fmt"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

type OrderPaid struct{ events.Schema }

func (OrderPaid) Name() string      { return "order.paid" }
func (OrderPaid) Topic() string     { return "orders" }
func (OrderPaid) Aggregate() string { return "Order" }
func (OrderPaid) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Int64("order_id"), field.Int64("cents")),
		events.V(2, field.Int64("order_id"), field.Int64("amount_cents")),
		events.V(3, field.Int64("order_id"), field.Int64("amount_cents"), field.String("region")),
	}
}

// Upcast renames version 1's cents; it knows no other step.
func (OrderPaid) Upcast(from int, fields map[string]any) (map[string]any, error) {
	if from != 1 {
		return nil, fmt.Errorf("no upcast from version %d", from)
	}
	fields["amount_cents"] = fields["cents"]
	delete(fields, "cents")
	return fields, nil
}

var All = []events.Interface{OrderPaid{}}
