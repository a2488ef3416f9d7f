// Package events declares defaults that do not fit their fields, and options
// on kinds they do not apply to.
package events

import (
	"time"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

type OrderPaid struct{ events.Schema }

func (OrderPaid) Name() string      { return "order.paid" }
func (OrderPaid) Topic() string     { return "orders" }
func (OrderPaid) Aggregate() string { return "Order" }
func (OrderPaid) Versions() []events.Version {
	amount := field.Int64("amount_cents").Descriptor()
	amount.Default = "12" // a hand-built descriptor can hold any value
	return []events.Version{events.V(1,
		field.Enum("currency").Values("EUR", "USD").Default("GBP"),
		field.Int("installments").Min(1).Max(12).Default(24),
		field.Time("paid_at").Default(time.Unix(0, 0)),
		field.String("note").Min(3),
		field.Enum("method"),
		wrapped{amount},
	)}
}

type wrapped struct{ d *field.Descriptor }

func (w wrapped) Descriptor() *field.Descriptor { return w.d }

var All = []events.Interface{OrderPaid{}}
