// Package events declares an event whose line items change between
// versions: 1 to 2 adds a defaulted field inside each line (automatic), 2
// to 3 turns each line's cents into an amount (an upcaster that maps the
// nested objects).
package events

import (
	"encoding/json"
	"fmt"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

// CartChanged is published when a cart's lines change.
type CartChanged struct{ events.Schema }

func (CartChanged) Name() string      { return "cart.changed" }
func (CartChanged) Topic() string     { return "carts" }
func (CartChanged) Aggregate() string { return "Cart" }
func (CartChanged) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Objects("lines", field.String("sku"), field.Int64("cents"))),
		events.V(2, field.Objects("lines", field.String("sku"), field.Int64("cents"), field.String("currency").Default("EUR"))),
		events.V(3, field.Objects("lines", field.String("sku"), field.Float64("amount"), field.String("currency").Default("EUR"))),
	}
}

// Upcast turns version 2's cents into version 3's amount, in every line.
func (CartChanged) Upcast(from int, fields map[string]any) (map[string]any, error) {
	if from != 2 {
		return nil, fmt.Errorf("no upcast from version %d", from)
	}
	lines, _ := fields["lines"].([]any)
	for i, l := range lines {
		line, ok := l.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("lines[%d] is not an object", i)
		}
		cents, err := line["cents"].(json.Number).Int64()
		if err != nil {
			return nil, fmt.Errorf("lines[%d].cents: %w", i, err)
		}
		delete(line, "cents")
		line["amount"] = float64(cents) / 100
	}
	return fields, nil
}

// All lists the declarations of this case.
var All = []events.Interface{CartChanged{}}
