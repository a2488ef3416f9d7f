package relay

import (
	"errors"

	"github.com/entoutbox/entoutbox/events"
)

// What both read paths do with a row: check what a broker cannot take
// (rows written by hand may hold anything). The message metadata is
// rebuilt from the columns by outbox.Metadata and outbox.DecodeHeaders,
// the writer's own wire format.

// checkRow finds what a broker cannot take, for rows written by hand.
func checkRow(name, topic, aggregateID string) error {
	switch {
	case name == "":
		return errors.New("event_name is empty")
	case topic == "":
		return errors.New("topic is empty")
	case aggregateID == "":
		return errors.New("aggregate_id is empty")
	}
	return events.CheckAggregateID(aggregateID) // what Emit refuses
}

// MetaRowError is set on a message read from a row that cannot be relayed
// as it is; its value is the reason.
const MetaRowError = events.ReservedPrefix + "row_error"
