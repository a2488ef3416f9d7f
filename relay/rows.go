package relay

import (
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/outbox"
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

// rowMetadata is the metadata of the message of a checked row
// (decodedHeaders set), as every read path of ours sends it; MetaTopic
// carries the row's topic to the publisher.
func rowMetadata(r *row, ce *CloudEvents) message.Metadata {
	md := outbox.Metadata(r.name, r.version, r.aggregateType, r.aggregateID, r.decodedHeaders)
	outbox.SetReadableFrom(md, r.version, r.readableFrom)
	md[events.MetaCreatedAt] = r.createdAt.UTC().Format(time.RFC3339Nano)
	md[events.MetaPublishID] = outbox.PublishID(r.eventID.String(), r.id)
	outbox.SetAggregateSeq(md, r.aggregateSeq)
	md[MetaTopic] = r.topic
	ce.set(md, r.eventID.String(), r.name, r.version, r.createdAt)
	return md
}
