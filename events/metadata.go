package events

// Metadata keys the outbox sets on every Watermill message it writes or
// relays, next to the row's own headers. The event id is the message UUID.
// Headers given to Emit may not use these keys (nor the "outbox_" prefix).
const (
	MetaEventName     = "outbox_event_name"
	MetaEventVersion  = "outbox_event_version"
	MetaAggregateType = "outbox_aggregate_type"
	MetaAggregateID   = "outbox_aggregate_id"
	MetaCreatedAt     = "outbox_created_at"

	// ReservedPrefix starts every metadata key the outbox owns.
	ReservedPrefix = "outbox_"
)
