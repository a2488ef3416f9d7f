// Package events declares nested fields that are refused, each error
// naming the event, version and full field path.
package events

import (
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

// OrderPlaced holds a bad declaration at every depth.
type OrderPlaced struct{ events.Schema }

func (OrderPlaced) Name() string      { return "order.placed" }
func (OrderPlaced) Topic() string     { return "orders" }
func (OrderPlaced) Aggregate() string { return "Order" }
func (OrderPlaced) Versions() []events.Version {
	return []events.Version{
		events.V(1,
			field.Object("empty"),
			field.Objects("lines",
				field.String("sku"),
				field.String("sku"),
				field.Enum("unit").Values("piece").Default("kg"),
				field.Objects("discounts", field.Int64("cents").MaxLen(3), nil),
			),
			field.Map("attributes", field.String("").Nillable()),
			field.List("codes", nil),
			field.List("parts", field.Object("", field.String("ref")).Optional()),
			field.Object("line", field.String("note")),
			field.Object("handler", field.String("name")),
		),
	}
}

// ItemAdded needs an upcaster for a new required field deep in a list of
// objects, and for a nested kind change, but has none.
type ItemAdded struct{ events.Schema }

func (ItemAdded) Name() string      { return "item.added" }
func (ItemAdded) Topic() string     { return "orders" }
func (ItemAdded) Aggregate() string { return "Order" }
func (ItemAdded) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Objects("lines", field.String("sku"), field.Map("labels", field.String("")))),
		events.V(2, field.Objects("lines", field.String("sku"), field.Int("qty"), field.Map("labels", field.Int("")))),
	}
}

// Dead's object "letter" would be generated as DeadLetter, an ent type.
type Dead struct{ events.Schema }

func (Dead) Name() string      { return "dead" }
func (Dead) Topic() string     { return "orders" }
func (Dead) Aggregate() string { return "Order" }
func (Dead) Versions() []events.Version {
	return []events.Version{events.V(1, field.Object("letter", field.String("text")))}
}

// Cart's line items would be generated as CartLine, the payload of the
// event declared after it.
type Cart struct{ events.Schema }

func (Cart) Name() string      { return "cart" }
func (Cart) Topic() string     { return "orders" }
func (Cart) Aggregate() string { return "Order" }
func (Cart) Versions() []events.Version {
	return []events.Version{events.V(1, field.Objects("lines", field.String("sku")))}
}

// CartLine is an event of its own.
type CartLine struct{ events.Schema }

func (CartLine) Name() string      { return "cart.line" }
func (CartLine) Topic() string     { return "orders" }
func (CartLine) Aggregate() string { return "Order" }
func (CartLine) Versions() []events.Version {
	return []events.Version{events.V(1, field.String("sku"))}
}

// All lists the declarations of this case.
var All = []events.Interface{OrderPlaced{}, ItemAdded{}, Dead{}, Cart{}, CartLine{}}
