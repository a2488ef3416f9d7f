package events

import (
	"errors"
	"fmt"
)

var (
	// ErrNotInTransaction is returned by Emit on a client that is not bound
	// to a transaction: an outbox write outside a transaction would not be
	// atomic with the business change, so it is refused.
	ErrNotInTransaction = errors.New("events: emit needs a transactional client (use tx.Outbox from client.Tx)")

	// ErrDuplicateEventID is returned by Emit when an event with the same id
	// is already in the outbox or scheduled (DeliverAt, DeliverAfter), to be
	// sent now or later alike. Nothing is written and the transaction stays
	// usable.
	ErrDuplicateEventID = errors.New("events: an event with this id is already in the outbox or scheduled")
)

// ValidationError reports a payload that breaks its declaration, or a
// header or aggregate id beyond the limits (see CheckHeader and
// CheckAggregateID; Field is then empty and Reason names it). Emit returns
// it before anything is sent to the database.
type ValidationError struct {
	Event   string // wire name, e.g. "order.paid"
	Version int
	Field   string // declared field name; empty for event-level problems
	Reason  string
}

func (e *ValidationError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("events: invalid %q v%d event: %s", e.Event, e.Version, e.Reason)
	}
	return fmt.Sprintf("events: invalid %q v%d payload: field %q %s", e.Event, e.Version, e.Field, e.Reason)
}
