// Package events declares an event with nested payloads: objects, lists of
// objects, lists and maps of scalars and of objects, three levels deep,
// with defaults inside; version 1 to 2 adds nested fields that upcast
// automatically.
package events

import (
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

// OrderPlaced is published when a customer places an order.
type OrderPlaced struct{ events.Schema }

func (OrderPlaced) Name() string      { return "order.placed" }
func (OrderPlaced) Topic() string     { return "orders" }
func (OrderPlaced) Aggregate() string { return "Order" }
func (OrderPlaced) Versions() []events.Version {
	return []events.Version{
		events.V(1,
			field.Int64("order_id"),
			field.Objects("lines", field.String("sku"), field.Int("qty").Min(1)),
			field.Object("address", field.String("street"), field.String("city")),
		),
		events.V(2,
			field.Int64("order_id"),
			field.Objects("lines",
				field.String("sku").MaxLen(32),
				field.Int("qty").Min(1),
				field.Enum("unit").Values("piece", "kg").Default("piece"),
				field.Objects("discounts", field.String("code"), field.Int64("cents").Positive()).Optional(),
			).Comment("the items ordered"),
			field.Object("address",
				field.String("street"),
				field.String("city"),
				field.String("country").Default("FR"),
			),
			field.Object("billing", field.String("vat_id")).Optional(),
			field.List("tags", field.Enum("").Values("gift", "express")).Optional(),
			field.Map("attributes", field.String("").MaxLen(64)).Optional(),
			field.Map("stock", field.Object("", field.Int("on_hand"), field.Int("reserved").Nillable().Default(0))).Optional(),
			field.List("grid", field.List("", field.Int("").Max(9))).Optional(),
			field.Map("bundles", field.Objects("", field.String("sku"), field.Int("n").Default(1))).Optional(),
			field.List("slots", field.Map("", field.Object("", field.String("at"), field.String("tz").Default("UTC")))).Optional(),
		),
	}
}

// All lists the declarations of this case.
var All = []events.Interface{OrderPlaced{}}
