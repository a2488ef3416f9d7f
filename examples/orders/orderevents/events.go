// Package orderevents declares the events of the orders example.
package orderevents

import (
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

// OrderPlaced is published when a customer places an order: its line items
// and where to ship it, nested in the payload.
type OrderPlaced struct{ events.Schema }

func (OrderPlaced) Name() string      { return "order.placed" }
func (OrderPlaced) Topic() string     { return "orders" }
func (OrderPlaced) Aggregate() string { return "Order" }
func (OrderPlaced) Versions() []events.Version {
	return []events.Version{
		events.V(1,
			field.Int64("order_id"),
			field.Objects("lines",
				field.String("sku").MaxLen(64),
				field.Int("qty").Min(1),
				field.Int64("unit_cents").Positive(),
			).Comment("the items ordered"),
			field.Object("ship_to",
				field.String("name"),
				field.String("street"),
				field.String("city"),
				field.String("country").Default("FR").Comment("ISO 3166-1 alpha-2 code"),
			),
			field.Map("attributes", field.String("").MaxLen(200)).Optional().
				Comment("free-form labels: a gift note, a delivery slot"),
		),
	}
}

// OrderPaid is published when payment for an order is captured.
type OrderPaid struct{ events.Schema }

func (OrderPaid) Name() string      { return "order.paid" }
func (OrderPaid) Topic() string     { return "orders" }
func (OrderPaid) Aggregate() string { return "Order" }
func (OrderPaid) Comment() string {
	return "OrderPaid is published when payment for an order is captured."
}
func (OrderPaid) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Int64("order_id"), field.Int64("amount_cents")),
		events.V(2,
			field.Int64("order_id"),
			field.Int64("amount_cents").Positive(),
			field.Enum("currency").Values("EUR", "USD", "GBP").Default("EUR").
				Comment("ISO 4217 code; v1 events were all in euros"),
		),
	}
}

// OrderCancelled is published when a customer cancels an unpaid order.
type OrderCancelled struct{ events.Schema }

func (OrderCancelled) Name() string      { return "order.cancelled" }
func (OrderCancelled) Topic() string     { return "orders" }
func (OrderCancelled) Aggregate() string { return "Order" }
func (OrderCancelled) Versions() []events.Version {
	return []events.Version{
		events.V(1,
			field.Int64("order_id"),
			field.String("reason").Optional().MaxLen(500),
			field.Time("cancelled_at"),
		),
	}
}
