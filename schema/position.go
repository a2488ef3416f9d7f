package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
	"github.com/google/uuid"
)

// ConsumerPositionTable is the default table name of the consumers'
// per-aggregate positions.
const ConsumerPositionTable = "outbox_consumer_positions"

// ConsumerPosition is how far one consumer name has applied one
// aggregate's events on one topic (their aggregate_seq). It is read and
// written in the handler's transaction, with the dedupe record: an event
// at or below the position is a duplicate, the next one is applied, one
// further ahead waits for its predecessor. So the effects of an aggregate
// happen in order with any number of instances of the consumer.
type ConsumerPosition struct {
	ent.Schema
}

// Annotations names the table.
func (ConsumerPosition) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: ConsumerPositionTable}}
}

// Fields of a position.
func (ConsumerPosition) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.String("consumer").Immutable().SchemaType(positionKey()).NotEmpty(),
		field.String("topic").Immutable().SchemaType(positionKey()),
		field.String("aggregate_type").Immutable().SchemaType(positionKey()),
		field.String("aggregate_id").Immutable().SchemaType(positionKey()),
		field.Int64("last_seq").NonNegative().Comment("the aggregate_seq of the last event applied (or passed over)"),
		// Set while the aggregate is held: its event at held_seq is in the
		// dead letters, and the ones after it wait for its repair.
		field.Int64("held_seq").Optional().Nillable(),
		field.UUID("held_event_id", uuid.UUID{}).Optional().Nillable(),
		field.Time("held_at").SchemaType(timestamp()).Optional().Nillable(),
		// Set while an event further ahead than the next waits for its
		// predecessor: a gap older than the consumer's bound holds the
		// aggregate instead of waiting for ever.
		field.Time("waiting_since").SchemaType(timestamp()).Optional().Nillable(),
		// The lowest aggregate_seq that has waited since waiting_since: an
		// aggregate new to the consumer (last_seq 0) starts there once it
		// waited StartAfter, not at whichever waiting event asks first.
		field.Int64("waiting_seq").Optional().Nillable(),
		field.Time("updated_at").SchemaType(timestamp()).Default(time.Now).UpdateDefault(time.Now).
			Annotations(now()),
	}
}

// positionKey is the type of the position key's columns on MySQL: four
// of ent's varchar(255) exceed InnoDB's 3,072 bytes a key may have.
func positionKey() map[string]string { return map[string]string{dialect.MySQL: "varchar(191)"} }

// Indexes: one position per consumer, topic and aggregate; held
// aggregates are found for status without a scan.
func (ConsumerPosition) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("consumer", "topic", "aggregate_type", "aggregate_id").Unique().StorageKey("outbox_consumer_positions_key"),
		index.Fields("consumer", "held_seq").StorageKey("outbox_consumer_positions_held").
			Annotations(entsql.IndexWhere("held_seq IS NOT NULL")),
	}
}
