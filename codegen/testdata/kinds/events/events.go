// Package events declares one event with every kind of field.
package events

import (
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

// ProfileUpdated has a field of every kind.
type ProfileUpdated struct{ events.Schema }

func (ProfileUpdated) Name() string      { return "profile.updated" }
func (ProfileUpdated) Topic() string     { return "profiles" }
func (ProfileUpdated) Aggregate() string { return "Profile" }
func (ProfileUpdated) Comment() string {
	return "ProfileUpdated is published when a user changes their profile.\nIt carries the whole profile."
}
func (ProfileUpdated) Versions() []events.Version {
	return []events.Version{
		events.V(1,
			field.String("display_name").MaxLen(64).Comment("shown to other users"),
			field.String("nickname").Optional(),
			field.String("locale").Default("en"),
			field.Bool("verified"),
			field.Bool("newsletter").Nillable().Default(true),
			field.Int("age").Min(0).Max(150),
			field.Int32("score").Optional().Positive(),
			field.Int64("user_id").Positive(),
			field.Int64("referrer_id").Nillable(),
			field.Float64("balance").Min(-1000.5),
			field.Time("updated_at"),
			field.Time("deleted_at").Nillable(),
			field.UUID("session_id"),
			field.Enum("plan").Values("free", "pro", "enterprise").Default("free"),
			field.Enum("theme").Values("light", "dark").Nillable(),
			field.Bytes("avatar").Optional(),
			field.Bytes("signature"),
			field.JSON("settings"),
			field.JSON("extra").Optional(),
			field.Strings("tags"),
			field.Ints("lucky_numbers").Optional(),
			field.Int64s("friend_ids"),
			field.Float64s("coordinates").Nillable(),
		),
	}
}

// All lists the declarations of this case.
var All = []events.Interface{ProfileUpdated{}}
