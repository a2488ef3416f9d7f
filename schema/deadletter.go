package schema

import (
	"encoding/json"
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
	"github.com/google/uuid"
)

// DeadLetterTable is the default table name of the dead letters.
const DeadLetterTable = "outbox_dead_letters"

// DeadLetter is an event set aside with the reason it could not be relayed
// or handled. Nothing is dropped: a dead letter can be inspected and replayed.
type DeadLetter struct {
	ent.Schema
}

// Annotations names the table.
func (DeadLetter) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: DeadLetterTable}}
}

// Fields of a dead letter. Most are optional: a malformed message may lack them.
func (DeadLetter) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.UUID("event_id", uuid.UUID{}).Optional(),
		field.String("source").Comment(`"relay" or the consumer name that gave up`),
		field.String("event_name").Optional(),
		field.Int("event_version").Optional(),
		field.String("topic").Optional(),
		field.String("aggregate_type").Optional(),
		field.String("aggregate_id").Optional(),
		field.Int64("aggregate_seq").Optional().Nillable().
			Comment("the event's place in its aggregate's order on its topic; a retry keeps it"),
		field.Bytes("payload").Optional().Comment("the payload as received, which may not be valid JSON"),
		field.JSON("headers", json.RawMessage{}).Optional().SchemaType(jsonb()).
			Comment("the headers as stored, which may not be an object of strings"),
		field.Text("reason"),
		field.Int("attempts").Default(0),
		field.Time("created_at").SchemaType(timestamp()).Default(time.Now).Immutable().
			Annotations(now()),
		// What an operator did with it (the admin package). A letter is
		// never deleted for being handled: retention removes settled ones.
		field.Time("retried_at").SchemaType(timestamp()).Optional().Nillable().
			Comment("when the event went back to the outbox for another delivery"),
		field.UUID("retried_event_id", uuid.UUID{}).Optional().Nillable().
			Comment("the event id of a retried letter, whose event_id is cleared: consumers skip an event " +
				"that has a dead letter of theirs with its id, and a retried one must reach them again"),
		field.Time("discarded_at").SchemaType(timestamp()).Optional().Nillable().
			Comment("when an operator set the letter aside for good; its consumer still skips the event"),
		field.Text("discard_note").Optional().Comment("why it was discarded"),
	}
}

// Indexes for browsing dead letters.
func (DeadLetter) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("source", "created_at").StorageKey("outbox_dead_letters_source"),
		index.Fields("event_id").StorageKey("outbox_dead_letters_event"),
	}
}
