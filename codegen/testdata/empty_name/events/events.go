// Package events declares empty names: an event, a topic, an aggregate and a
// field.
package events

import (
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

type OrderPaid struct{ events.Schema }

func (OrderPaid) Name() string      { return "" }
func (OrderPaid) Topic() string     { return "" }
func (OrderPaid) Aggregate() string { return "" }
func (OrderPaid) Versions() []events.Version {
	return []events.Version{events.V(1, field.Int64("order_id"), field.String(""))}
}

var All = []events.Interface{OrderPaid{}}
