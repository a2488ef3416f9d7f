// Package events declares an event whose Go type is an ent schema's name.
package events

import (
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

type Order struct{ events.Schema }

func (Order) Name() string      { return "order" }
func (Order) Topic() string     { return "orders" }
func (Order) Aggregate() string { return "Order" }
func (Order) Versions() []events.Version {
	return []events.Version{events.V(1, field.Int64("order_id"))}
}

var All = []events.Interface{Order{}}
