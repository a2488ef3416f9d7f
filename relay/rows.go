package relay

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"

	"github.com/entoutbox/entoutbox/events"
)

// What both read paths do with a row: check what a broker cannot take
// (rows written by hand may hold anything) and rebuild the message
// metadata the writer folded into columns.

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

func decodeHeaders(b []byte) (map[string]string, error) {
	if len(b) == 0 || string(b) == "null" {
		return nil, nil
	}
	var h map[string]string
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("headers are not a JSON object of strings: %w", err)
	}
	return h, events.CheckHeaders(h) // what Emit refuses
}

// metadataOf rebuilds the message metadata of a row.
func metadataOf(name string, version int, aggType, aggID string, headers map[string]string) map[string]string {
	md := make(map[string]string, len(headers)+4)
	maps.Copy(md, headers)
	md[events.MetaEventName] = name
	md[events.MetaEventVersion] = strconv.Itoa(version)
	md[events.MetaAggregateType] = aggType
	md[events.MetaAggregateID] = aggID
	return md
}
