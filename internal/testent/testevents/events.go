// Package testevents declares the events of the library's own tests.
package testevents

import (
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
var All = []events.Interface{OrderPaid{}, ProfileUpdated{}}
