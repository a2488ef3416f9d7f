// Package events declares, per compatible rule of the README's table, an
// event whose version 2 makes that change: the lock records whether each
// step is backward and forward compatible. Its lock.json holds a draft that
// changed since (drafts may) and an event no longer declared, whose entries
// are retired (they stay in the lock, rule EVENT_KEPT).
package events

import (
	"encoding/json"
	"math"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

type rule struct{ events.Schema }

func (rule) Topic() string     { return "rules" }
func (rule) Aggregate() string { return "Rule" }

// FieldAddOptional adds an optional field and one with a default.
type FieldAddOptional struct{ rule }

func (FieldAddOptional) Name() string { return "field_add_optional" }
func (FieldAddOptional) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Int64("id")),
		events.V(2, field.Int64("id"), field.String("note").Optional(), field.String("currency").Default("EUR")),
	}
}

// FieldRelax makes a required field optional.
type FieldRelax struct{ rule }

func (FieldRelax) Name() string { return "field_relax" }
func (FieldRelax) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Int64("id"), field.String("note")),
		events.V(2, field.Int64("id"), field.String("note").Optional()),
	}
}

// FieldRelaxDefault gives a required field a default, at the top and
// nested: the schema no longer requires the key, which consumers of
// version 1 do.
type FieldRelaxDefault struct{ rule }

func (FieldRelaxDefault) Name() string { return "field_relax_default" }
func (FieldRelaxDefault) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Int64("id"), field.String("currency"), field.Object("address", field.String("country"))),
		events.V(2, field.Int64("id"), field.String("currency").Default("EUR"),
			field.Object("address", field.String("country").Default("FR"))),
	}
}

// EnumValueAdd adds an enum value.
type EnumValueAdd struct{ rule }

func (EnumValueAdd) Name() string { return "enum_value_add" }
func (EnumValueAdd) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Int64("id"), field.Enum("tier").Values("a", "b")),
		events.V(2, field.Int64("id"), field.Enum("tier").Values("a", "b", "c")),
	}
}

// BoundsLoosen widens a bound.
type BoundsLoosen struct{ rule }

func (BoundsLoosen) Name() string { return "bounds_loosen" }
func (BoundsLoosen) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Int64("id"), field.Int("qty").Min(1).Max(10), field.String("sku").MaxLen(8)),
		events.V(2, field.Int64("id"), field.Int("qty").Min(0).Max(100), field.String("sku").MaxLen(16)),
	}
}

// BoundsTighten narrows bounds: forward compatible, and older payloads out
// of the new bounds are dead-lettered.
type BoundsTighten struct{ rule }

func (BoundsTighten) Name() string { return "bounds_tighten" }
func (BoundsTighten) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Int64("id"), field.Int("qty").Max(100), field.String("sku")),
		events.V(2, field.Int64("id"), field.Int("qty").Positive().Max(10), field.String("sku").MaxLen(8)),
	}
}

// DefaultChange changes a default.
type DefaultChange struct{ rule }

func (DefaultChange) Name() string { return "default_change" }
func (DefaultChange) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Int64("id"), field.String("currency").Default("EUR")),
		events.V(2, field.Int64("id"), field.String("currency").Default("USD")),
	}
}

// FieldKindSameWire changes Go kinds that have the same JSON: int and
// int64, ints and int64s.
type FieldKindSameWire struct{ rule }

func (FieldKindSameWire) Name() string { return "field_kind_same_wire" }
func (FieldKindSameWire) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Int64("id"), field.Int("qty"), field.Ints("sizes")),
		events.V(2, field.Int64("id"), field.Int64("qty"), field.Int64s("sizes")),
	}
}

// FieldKindWiden widens int32 fields, in a list's elements too.
type FieldKindWiden struct{ rule }

func (FieldKindWiden) Name() string { return "field_kind_widen" }
func (FieldKindWiden) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Int64("id"), field.Int32("qty"), field.Int32("score"), field.List("counts", field.Int32(""))),
		events.V(2, field.Int64("id"), field.Int64("qty"), field.Float64("score"), field.List("counts", field.Int64(""))),
	}
}

// FieldKindToFloat turns integers into float64: integers beyond 2^53 lose
// precision.
type FieldKindToFloat struct{ rule }

func (FieldKindToFloat) Name() string { return "field_kind_to_float" }
func (FieldKindToFloat) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Int64("id"), field.Int("price"), field.Int64s("weights")),
		events.V(2, field.Int64("id"), field.Float64("price"), field.Float64s("weights")),
	}
}

// FieldKindNarrow narrows numbers: forward compatible (consumers of
// version 1 read every value of version 2), with the upcaster version 2's
// consumers need for version 1's fractions and values beyond int32.
type FieldKindNarrow struct{ rule }

func (FieldKindNarrow) Name() string { return "field_kind_narrow" }
func (FieldKindNarrow) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Int64("id"), field.Float64("price"), field.Int64("stock")),
		events.V(2, field.Int64("id"), field.Int("price"), field.Int32("stock")),
	}
}

// Upcast rounds version 1's price to a whole number and caps its stock at
// the largest int32.
func (FieldKindNarrow) Upcast(from int, fields map[string]any) (map[string]any, error) {
	price, err := fields["price"].(json.Number).Float64()
	if err != nil {
		return nil, err
	}
	stock, err := fields["stock"].(json.Number).Int64()
	if err != nil {
		return nil, err
	}
	fields["price"], fields["stock"] = int64(math.Round(price)), min(stock, math.MaxInt32)
	return fields, nil
}

// Drafted has a version not released yet, whose shape changed since the
// lock was written.
type Drafted struct{ rule }

func (Drafted) Name() string { return "drafted" }
func (Drafted) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Int64("id")),
		events.V(2, field.Int64("id"), field.Int("count").Optional()).Draft(),
	}
}

var All = []events.Interface{FieldAddOptional{}, FieldRelax{}, FieldRelaxDefault{}, EnumValueAdd{}, BoundsLoosen{}, BoundsTighten{}, DefaultChange{},
	FieldKindSameWire{}, FieldKindWiden{}, FieldKindToFloat{}, FieldKindNarrow{}, Drafted{}}
