package events

import (
	"time"

	"github.com/google/uuid"
)

// Meta describes one delivery of an event to a consumer's handler.
type Meta struct {
	EventID       uuid.UUID
	Name          string // wire name
	Version       int    // the version the event was emitted with (the handler sees it upcast to the latest)
	Topic         string
	AggregateType string
	AggregateID   string
	// AggregateSeq is the event's place among its aggregate's events on
	// its topic (1, 2, 3...); 0 when its producer does not number them.
	AggregateSeq int64
	CreatedAt    time.Time // when the event was written; zero if the message did not say
	// DeliverAt is when a scheduled event (DeliverAt, DeliverAfter) was
	// due, by the database's clock; zero for an event sent at once.
	DeliverAt time.Time
	Headers   map[string]string
	Consumer  string // the consumer name the handler is registered under
	Attempt   int    // 1 for the first try of this delivery
	// Tenant is the tenant whose database the event was relayed from
	// (MetaTenant); "" when the message names none. Handlers made for
	// tenants (NewTenantOutboxHandlers) run in that tenant's database.
	Tenant string
}

// Upcaster is implemented by an event declaration whose versions cannot all
// be upcast automatically (a field removed, renamed or changed in kind, or a
// new required field without a default). Upcast turns the decoded JSON
// fields of version from into those of version from+1. The generator
// refuses a declaration that needs an upcaster and has none.
//
// Upcast alone handles one step: once a second step needs an upcaster,
// the declaration says which steps Upcast handles with UpcastSteps
// (UpcastStepper), and the generator refuses a step it does not list.
type Upcaster interface {
	Upcast(from int, fields map[string]any) (map[string]any, error)
}

// UpcastStepper is an Upcaster that declares the steps its Upcast handles:
// UpcastSteps lists the versions it upcasts from, 1 for 1 -> 2. go generate
// checks the list against the steps that need an upcaster, both ways: a
// step that needs one and is not listed is refused, naming the step and
// what needs it, and so is a listed step that defaults fill in (Upcast is
// never called for it). Declare it when a new version adds a step:
//
//	func (PriceChanged) UpcastSteps() []int { return []int{1, 2} } // 1 -> 2 and 2 -> 3
type UpcastStepper interface {
	Upcaster
	UpcastSteps() []int
}
