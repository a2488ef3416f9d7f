// Package events narrows number fields in version 2 (rule
// FIELD_KIND_NARROW): a float64 becomes an int, an int64 an int32, a list
// of float64 a list of int64. Consumers of version 1 read every value of
// version 2 (forward), but version 1's payloads may hold fractions or
// values beyond int32, so version 2's consumers need an upcaster.
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
		events.V(1, field.Int64("id"), field.Float64("price"), field.Int64("stock"), field.Float64s("weights")),
		events.V(2, field.Int64("id"), field.Int("price"), field.Int32("stock"), field.Int64s("weights")),
	}
}

var All = []events.Interface{PriceChanged{}}
