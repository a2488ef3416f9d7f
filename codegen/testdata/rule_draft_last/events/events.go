// Package events declares a released version after a draft (rule
// DRAFT_LAST).
package events

import (
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

type TicketOpened struct{ events.Schema }

func (TicketOpened) Name() string      { return "ticket.opened" }
func (TicketOpened) Topic() string     { return "tickets" }
func (TicketOpened) Aggregate() string { return "Ticket" }
func (TicketOpened) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Int64("id")),
		events.V(2, field.Int64("id"), field.String("title").Optional()).Draft(),
		events.V(3, field.Int64("id"), field.String("title").Optional(), field.String("body").Optional()),
	}
}

var All = []events.Interface{TicketOpened{}}
