// Package events declares versions that cannot be upcast automatically and
// no upcaster.
package events

import (
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

type PriceChanged struct{ events.Schema }

func (PriceChanged) Name() string      { return "price.changed" }
func (PriceChanged) Topic() string     { return "catalog" }
func (PriceChanged) Aggregate() string { return "Product" }
func (PriceChanged) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.String("sku"), field.Int64("cents"), field.Enum("tier").Values("a", "b", "c")),
		events.V(2, field.String("sku"), field.Int64("cents"), field.Enum("tier").Values("a", "b"),
			field.String("currency").Optional()),
		events.V(3, field.String("sku").Optional(), field.String("cents"), field.Enum("tier").Values("a", "b"),
			field.String("currency"), field.String("region")),
	}
}

var All = []events.Interface{PriceChanged{}}
