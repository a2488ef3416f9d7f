// Package events declares an event whose steps 1 -> 2 and 2 -> 3 both need
// an upcaster, and an Upcast that declares it handles both (UpcastSteps).
package events

import (
	"fmt"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

// OrderPaid is published when payment for an order is captured.
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

// Upcast renames version 1's cents, and places version 2's orders in the
// only region there was.
func (OrderPaid) Upcast(from int, fields map[string]any) (map[string]any, error) {
	switch from {
	case 1:
		fields["amount_cents"] = fields["cents"]
		delete(fields, "cents")
	case 2:
		fields["region"] = "eu"
	default:
		return nil, fmt.Errorf("no upcast from version %d", from)
	}
	return fields, nil
}

// UpcastSteps says Upcast handles 1 -> 2 and 2 -> 3.
func (OrderPaid) UpcastSteps() []int { return []int{1, 2} }

// All lists the declarations of this case.
var All = []events.Interface{OrderPaid{}}
