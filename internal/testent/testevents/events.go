// Package testevents declares the events of the library's own tests.
package testevents

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

// OrderPaid is the example event in two versions.
type OrderPaid struct{ events.Schema }

func (OrderPaid) Name() string      { return "order.paid" }
func (OrderPaid) Topic() string     { return "orders" }
func (OrderPaid) Aggregate() string { return "Order" }
func (OrderPaid) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Int64("order_id"), field.Int64("amount_cents")),
		events.V(2, field.Int64("order_id"), field.Int64("amount_cents").Positive(),
			field.Enum("currency").Values("EUR", "USD").Default("EUR")),
	}
}

// ProfileUpdated exercises the field kinds through the database.
type ProfileUpdated struct{ events.Schema }

func (ProfileUpdated) Name() string      { return "profile.updated" }
func (ProfileUpdated) Topic() string     { return "profiles" }
func (ProfileUpdated) Aggregate() string { return "Profile" }
func (ProfileUpdated) Versions() []events.Version {
	return []events.Version{events.V(1,
		field.String("display_name"),
		field.String("nickname").Optional(),
		field.Bool("verified"),
		field.Int32("score"),
		field.Float64("balance"),
		field.Time("updated_at"),
		field.Time("deleted_at").Nillable(),
		field.UUID("session_id"),
		field.Enum("plan").Values("free", "pro"),
		field.Bytes("avatar").Optional(),
		field.JSON("settings"),
		field.Strings("tags"),
		field.Int64s("friend_ids").Optional(),
	)}
}

// All lists the test events.
var All = []events.Interface{OrderPaid{}, ProfileUpdated{}, PriceChanged{}, OrderPlaced{}, CartChanged{}, ShipmentBooked{}, AllKinds{},
	PaymentReminder{}, AuditRecorded{}}

// PaymentReminder is scheduled (events.DeliverAfter) when an order is
// placed, and cancelled when it is paid; it may wait up to 30 days.
type PaymentReminder struct{ events.Schema }

func (PaymentReminder) Name() string            { return "payment.reminder" }
func (PaymentReminder) Topic() string           { return "reminders" }
func (PaymentReminder) Aggregate() string       { return "Order" }
func (PaymentReminder) MaxDelay() time.Duration { return 30 * 24 * time.Hour }
func (PaymentReminder) Versions() []events.Version {
	return []events.Version{events.V(1, field.Int64("order_id"))}
}

// AuditRecorded records what happened when it happened: it is never
// scheduled (MaxDelay 0).
type AuditRecorded struct{ events.Schema }

func (AuditRecorded) Name() string            { return "audit.recorded" }
func (AuditRecorded) Topic() string           { return "audits" }
func (AuditRecorded) Aggregate() string       { return "Account" }
func (AuditRecorded) MaxDelay() time.Duration { return 0 }
func (AuditRecorded) Versions() []events.Version {
	return []events.Version{events.V(1, field.String("action"))}
}

// OrderPlaced nests: line items, an address, a map of attributes. Version
// 2 adds defaulted fields inside the lines and the address, so a version 1
// payload shows whether defaults reach nested objects on the way up; pack
// is a number, whose default only decoding can apply (0 is a value).
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
			field.Objects("lines", field.String("sku"), field.Int("qty").Min(1),
				field.Enum("unit").Values("piece", "kg").Default("piece"),
				field.Int("pack").Default(1).Comment("items per pack; version 1 sold single items")),
			field.Object("address", field.String("street"), field.String("city"),
				field.String("country").Default("FR")),
			field.Map("attributes", field.Object("", field.String("value").MaxLen(16))).Optional(),
		),
	}
}

// PriceChanged needs an upcaster between versions 2 and 3 (cents become a
// decimal amount); 1 to 2 only adds a field with a default. Version 3
// defaults to another currency, so a version 1 payload shows whether it got
// version 2's default on the way.
type PriceChanged struct{ events.Schema }

func (PriceChanged) Name() string      { return "price.changed" }
func (PriceChanged) Topic() string     { return "catalog" }
func (PriceChanged) Aggregate() string { return "Product" }
func (PriceChanged) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.String("sku"), field.Int64("cents")),
		events.V(2, field.String("sku"), field.Int64("cents"), field.String("currency").Default("EUR")),
		events.V(3, field.String("sku"), field.Float64("amount"), field.String("currency").Default("USD")),
	}
}

// Upcast turns version 2's cents into version 3's amount.
func (PriceChanged) Upcast(from int, fields map[string]any) (map[string]any, error) {
	if from != 2 {
		return nil, fmt.Errorf("no upcast from version %d", from)
	}
	n, ok := fields["cents"].(json.Number)
	if !ok {
		return nil, fmt.Errorf("cents is %T, not a number", fields["cents"])
	}
	cents, err := n.Int64()
	if err != nil {
		return nil, fmt.Errorf("cents: %w", err)
	}
	delete(fields, "cents")
	fields["amount"] = float64(cents) / 100
	return fields, nil
}

// CartChanged is PriceChanged nested in line items: version 2 adds a
// defaulted currency inside each line (an automatic step), version 3 turns
// each line's cents into an amount (Upcast maps the nested objects) and
// defaults to another currency, so a version 1 payload shows whether its
// lines got version 2's default on the way.
type CartChanged struct{ events.Schema }

func (CartChanged) Name() string      { return "cart.changed" }
func (CartChanged) Topic() string     { return "carts" }
func (CartChanged) Aggregate() string { return "Cart" }
func (CartChanged) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Objects("lines", field.String("sku"), field.Int64("cents"))),
		events.V(2, field.Objects("lines", field.String("sku"), field.Int64("cents"),
			field.String("currency").Default("EUR"))),
		events.V(3, field.Objects("lines", field.String("sku"), field.Float64("amount"),
			field.String("currency").Default("USD"))),
	}
}

// Upcast turns version 2's cents into version 3's amount, in every line.
func (CartChanged) Upcast(from int, fields map[string]any) (map[string]any, error) {
	if from != 2 {
		return nil, fmt.Errorf("no upcast from version %d", from)
	}
	lines, ok := fields["lines"].([]any)
	if !ok {
		return nil, fmt.Errorf("lines is %T, not a list", fields["lines"])
	}
	for i, l := range lines {
		line, ok := l.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("lines[%d] is %T, not an object", i, l)
		}
		n, ok := line["cents"].(json.Number)
		if !ok {
			return nil, fmt.Errorf("lines[%d].cents is %T, not a number", i, line["cents"])
		}
		cents, err := n.Int64()
		if err != nil {
			return nil, fmt.Errorf("lines[%d].cents: %w", i, err)
		}
		delete(line, "cents")
		line["amount"] = float64(cents) / 100
	}
	return fields, nil
}

// ShipmentBooked adds a required field in version 2, which its Upcast fills
// in for version 1 payloads: a forward compatible step through an upcaster,
// so Emit may write version 1 when the Upcast gives back the value the
// payload holds.
type ShipmentBooked struct{ events.Schema }

func (ShipmentBooked) Name() string      { return "shipment.booked" }
func (ShipmentBooked) Topic() string     { return "shipments" }
func (ShipmentBooked) Aggregate() string { return "Shipment" }
func (ShipmentBooked) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Int64("order_id"), field.String("carrier")),
		events.V(2, field.Int64("order_id"), field.String("carrier"),
			field.Enum("service").Values("standard", "express")),
	}
}

// Upcast books version 1's shipments as standard: it offered no other.
func (ShipmentBooked) Upcast(from int, fields map[string]any) (map[string]any, error) {
	if from != 1 {
		return nil, fmt.Errorf("no upcast from version %d", from)
	}
	fields["service"] = "standard"
	return fields, nil
}

// AllKinds has a field of every kind, each presence (required, optional,
// nillable, defaulted) and nested objects, lists and maps, for the tests
// that hold the generated handlers to the published JSON Schema. Version 2
// adds fields at every depth, forward compatible: consumers of version 1
// read its payloads.
type AllKinds struct{ events.Schema }

func (AllKinds) Name() string      { return "all.kinds" }
func (AllKinds) Topic() string     { return "samples" }
func (AllKinds) Aggregate() string { return "Sample" }
func (AllKinds) Versions() []events.Version {
	v1 := []field.Field{
		field.String("s").MaxLen(8),
		field.String("note").Optional(),
		field.String("locale").Default("en"),
		field.String("label").Optional().Default("none"),
		field.String("nick").Nillable(),
		field.Bool("b"),
		field.Bool("flag").Nillable().Default(true),
		field.Int("i").Min(0).Max(150),
		field.Int32("i32").Optional().Positive(),
		field.Int64("i64"),
		field.Int64("ref").Nillable(),
		field.Int("level").Default(3),
		field.Float64("f").Min(-1000.5),
		field.Float64("ratio").Optional().Max(1),
		field.Time("at"),
		field.Time("deleted_at").Nillable(),
		field.UUID("id"),
		field.UUID("other_id").Optional(),
		field.Enum("plan").Values("free", "pro").Default("free"),
		field.Enum("theme").Values("light", "dark").Nillable(),
		field.Enum("size").Values("S", "M"),
		field.Bytes("sig"),
		field.Bytes("avatar").Optional(),
		field.JSON("settings"),
		field.JSON("extra").Optional(),
		field.Strings("tags"),
		field.Ints("lucky").Optional(),
		field.Int64s("friends"),
		field.Float64s("coords").Nillable(),
		field.Object("address", field.String("city"), field.String("zip").Optional(), field.String("country").Default("FR")),
		field.Object("billing", field.String("vat")).Optional(),
		field.Objects("lines", field.String("sku"), field.Int32("qty").Positive(),
			field.Enum("unit").Values("piece", "kg").Default("piece")),
		field.List("grid", field.List("", field.Int("").Max(9))).Optional(),
		field.Map("stock", field.Int64("")),
		field.Map("attrs", field.Object("", field.String("value").MaxLen(4), field.Time("at").Optional())).Optional(),
	}
	v2 := append(slices.Clone(v1[:len(v1)-6]),
		field.String("channel").Optional(),
		field.Object("address", field.String("city"), field.String("zip").Optional(), field.String("country").Default("FR"),
			field.String("street").Optional()),
		field.Object("billing", field.String("vat")).Optional(),
		field.Objects("lines", field.String("sku"), field.Int32("qty").Positive(),
			field.Enum("unit").Values("piece", "kg").Default("piece"), field.Float64("discount").Optional()),
		field.List("grid", field.List("", field.Int("").Max(9))).Optional(),
		field.Map("stock", field.Int64("")),
		field.Map("attrs", field.Object("", field.String("value").MaxLen(4), field.Time("at").Optional(),
			field.Bool("shown").Default(true))).Optional(),
	)
	return []events.Version{events.V(1, v1...), events.V(2, v2...)}
}
