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
	// MetaReadableFrom, set only when below the event's version, is the
	// oldest version whose consumers can read the payload as theirs (every
	// step since is forward compatible): a consumer one version behind
	// during a rolling deploy handles it instead of dead-lettering it.
	MetaReadableFrom = "outbox_readable_from"

	// ReservedPrefix starts every metadata key the outbox owns.
	ReservedPrefix = "outbox_"
)
