package outbox

import (
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/entoutbox/entoutbox/events"
)

// The wire format between a row and a message, owned here once: the
// writer folds the outbox metadata into columns and the headers into a
// JSON object; both relay read paths rebuild the message from them.

// Metadata is the message metadata of a row: its headers plus the event
// name, version and aggregate under the reserved keys.
func Metadata(name string, version int, aggregateType, aggregateID string, headers map[string]string) message.Metadata {
	md := make(message.Metadata, len(headers)+4)
	maps.Copy(md, headers)
	md[events.MetaEventName] = name
	md[events.MetaEventVersion] = strconv.Itoa(version)
	md[events.MetaAggregateType] = aggregateType
	md[events.MetaAggregateID] = aggregateID
	return md
}

// PublishID is the events.MetaPublishID of the message of outbox row
// rowID, which holds event eventID.
func PublishID(eventID string, rowID int64) string {
	return eventID + "/" + strconv.FormatInt(rowID, 10)
}

// ReplayPublishID is the events.MetaPublishID of event eventID sent again
// by the replay that started at the given time (Unix nanoseconds): unlike
// the row's, it reaches a broker that saw the row's publish within its
// duplicate window.
func ReplayPublishID(eventID string, replay int64) string {
	return eventID + "/replay-" + strconv.FormatInt(replay, 10)
}

// SetAggregateSeq sets events.MetaAggregateSeq in md when the row has
// its number (seq > 0).
func SetAggregateSeq(md message.Metadata, seq int64) {
	if seq > 0 {
		md[events.MetaAggregateSeq] = strconv.FormatInt(seq, 10)
	}
}

// SetReadableFrom sets events.MetaReadableFrom in md when readableFrom is
// below version: only then can an older consumer read the payload.
func SetReadableFrom(md message.Metadata, version, readableFrom int) {
	if readableFrom > 0 && readableFrom < version {
		md[events.MetaReadableFrom] = strconv.Itoa(readableFrom)
	}
}

// readableFromColumn is the readable_from column of a row: NULL unless an
// older version's consumers can read it.
func readableFromColumn(ev Event) any {
	if ev.ReadableFrom > 0 && ev.ReadableFrom < ev.Version {
		return ev.ReadableFrom
	}
	return nil
}

// encodeHeaders is the headers column: a JSON object, or NULL for none.
func encodeHeaders(h map[string]string) (any, error) {
	if len(h) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encoding headers: %w", err)
	}
	return string(b), nil
}

// DecodeHeaders reads a headers column back, and checks it as Emit does:
// a row written by hand may hold what no broker carries.
func DecodeHeaders(b []byte) (map[string]string, error) {
	if len(b) == 0 || string(b) == "null" {
		return nil, nil
	}
	var h map[string]string
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("outbox: headers are not a JSON object of strings: %w", err)
	}
	at, scheduled := h[events.MetaDeliverAt]
	if !scheduled {
		return h, events.CheckHeaders(h)
	}
	// The one reserved key a row holds: the relay wrote it when the
	// scheduled event became due.
	if _, err := time.Parse(time.RFC3339Nano, at); err != nil {
		return nil, fmt.Errorf("outbox: header %s is not an RFC 3339 time: %q", events.MetaDeliverAt, at)
	}
	given := maps.Clone(h)
	delete(given, events.MetaDeliverAt)
	return h, events.CheckHeaders(given)
}
