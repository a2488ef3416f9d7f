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
	// MetaPublishID is the id of this one publish of the event, which a
	// broker that drops duplicates by message id (JetStream's
	// Nats-Msg-Id) uses instead of the event id: every outbox row of an
	// event (a dead-letter retry writes a new one) and every replay has
	// its own, so the broker stores each, while the event id consumers
	// dedupe on (the message UUID) stays the same. The relay sets it to
	// "<event id>/<row id>": publishing one row again after a crash is
	// still dropped as the duplicate it is.
	MetaPublishID = "outbox_publish_id"
	// MetaAggregateSeq, set when the producer counts its aggregates'
	// events (schema.AggregateSequence), is the event's place among its
	// aggregate's events on its topic: 1, 2, 3..., dense over committed
	// transactions. Consumers apply an aggregate's events in this order.
	MetaAggregateSeq = "outbox_aggregate_seq"
	// MetaDeliveryCount is set by the subscriber, not the outbox: how
	// many times the broker has delivered the message, this delivery
	// included ("1" the first time). NATS JetStream counts every delivery;
	// RabbitMQ only says whether the message was delivered before ("2"
	// then: at least twice). Other brokers leave it unset.
	MetaDeliveryCount = "outbox_delivery_count"
	// MetaDeliverAt is set on a scheduled event (DeliverAt, DeliverAfter):
	// the time it was due, by the database's clock, in RFC 3339 with
	// microseconds, UTC. The relay writes it into the row's headers when
	// the event becomes due; its lateness is the time from it to the
	// publish.
	MetaDeliverAt = "outbox_deliver_at"
	// MetaNackDelay is set by a consumer on a message it nacks to come
	// again later, not at once: a Go duration ("5s"). An event that waited
	// for its aggregate's previous one and was nacked must not come
	// straight back and take the slot its predecessor needs. NATS
	// JetStream delays the redelivery by it (a NAK with a delay); other
	// brokers ignore it.
	MetaNackDelay = "outbox_nack_delay"
	// MetaTenant is the tenant whose database the event was relayed from,
	// set by a relay given one (relay.Config.Tenant; every relay of the
	// fleet package): a service with a database or schema per tenant
	// tells its tenants' events apart by it.
	MetaTenant = "outbox_tenant"

	// ReservedPrefix starts every metadata key the outbox owns.
	ReservedPrefix = "outbox_"
)
