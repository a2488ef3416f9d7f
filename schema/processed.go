package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
	"github.com/google/uuid"
)

// ProcessedEventTable is the default table name of the dedupe table.
const ProcessedEventTable = "outbox_processed_events"

// ProcessedEvent records that a consumer handled an event. It is inserted in
// the handler's transaction, so the effect and the record commit together
// and a redelivered event is recognised and skipped.
type ProcessedEvent struct {
	ent.Schema
}

// Annotations names the table.
func (ProcessedEvent) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: ProcessedEventTable}}
}

// Fields of the dedupe row.
func (ProcessedEvent) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.String("consumer").Immutable().NotEmpty(),
		field.UUID("event_id", uuid.UUID{}).Immutable(),
		field.String("event_name").Immutable(),
		field.Int("attempts").Default(1).Immutable().Comment("the try on which the handler succeeded"),
		field.Time("processed_at").SchemaType(timestamp()).Default(time.Now).Immutable().
			Annotations(now()),
	}
}

// Indexes: the unique pair is the dedupe key; processed_at serves retention.
func (ProcessedEvent) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("consumer", "event_id").Unique().StorageKey("outbox_processed_events_key"),
		index.Fields("processed_at").StorageKey("outbox_processed_events_age"),
	}
}
