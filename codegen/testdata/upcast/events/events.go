// Package events declares an event whose versions need an upcaster between
// 2 and 3, and upcast automatically between 1 and 2.
package events

import (
	"encoding/json"
	"fmt"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

// PriceChanged is published when a product's price changes.
type PriceChanged struct{ events.Schema }

func (PriceChanged) Name() string      { return "price.changed" }
func (PriceChanged) Topic() string     { return "catalog" }
func (PriceChanged) Aggregate() string { return "Product" }
func (PriceChanged) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.String("sku"), field.Int64("cents")),
		events.V(2, field.String("sku"), field.Int64("cents"), field.String("currency").Default("EUR")),
		events.V(3, field.String("sku"), field.Float64("amount"), field.String("currency").Default("EUR")),
	}
}

// Upcast turns version 2's cents into version 3's amount.
func (PriceChanged) Upcast(from int, fields map[string]any) (map[string]any, error) {
	if from != 2 {
		return nil, fmt.Errorf("no upcast from version %d", from)
	}
	cents, err := fields["cents"].(json.Number).Int64()
	if err != nil {
		return nil, fmt.Errorf("cents: %w", err)
	}
	delete(fields, "cents")
	fields["amount"] = float64(cents) / 100
	return fields, nil
}

// All lists the declarations of this case.
var All = []events.Interface{PriceChanged{}}
