package schema

import (
	"encoding/json"
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
	"github.com/google/uuid"
)

// ScheduledEventTable is the default table name of the events emitted for
// a later time.
const ScheduledEventTable = "outbox_scheduled_events"

// ScheduledEvent holds an event emitted with events.DeliverAt or
// events.DeliverAfter until it is due. The relay moves a due event into the
// outbox in one transaction (the row here is deleted, an outbox row with
// the same event id written), and only then does the event take its place
// in its aggregate's order (aggregate_seq): a scheduled event holds back
// none of its aggregate's other events while it waits. Due means by the
// database's clock.
//
// Keeping them apart from the outbox keeps the relay's claim of due events
// as cheap with a million events waiting as with none.
type ScheduledEvent struct {
	ent.Schema
}

// Annotations names the table.
func (ScheduledEvent) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: ScheduledEventTable}}
}

// Fields of a scheduled event: the outbox row it becomes, and when.
func (ScheduledEvent) Fields() []ent.Field {
	return []ent.Field{
		// id is the insertion order: events of an aggregate due at the same
		// time become due in it, which is their commit order (Emit locks
		// the aggregate's counter, as for any event).
		field.Int64("id"),
		field.UUID("event_id", uuid.UUID{}).Unique().Immutable().
			Comment("the event id it keeps in the outbox and on the broker"),
		field.String("event_name").Immutable(),
		field.Int("event_version").Immutable().Positive(),
		field.String("topic").Immutable(),
		field.String("aggregate_type").Immutable(),
		field.String("aggregate_id").Immutable(),
		field.JSON("payload", json.RawMessage{}).Immutable().SchemaType(jsonb()),
		field.JSON("headers", map[string]string{}).Optional().Immutable().SchemaType(jsonb()),
		field.Int("readable_from").Optional().Nillable().Immutable().Positive(),
		field.Time("deliver_at").SchemaType(timestamp()).Immutable().
			Comment("when the event is due, by the database's clock; never sent before"),
		field.Time("created_at").SchemaType(timestamp()).Default(time.Now).Immutable().
			Annotations(now()),
		// transaction_id finds what one transaction scheduled (the
		// generated Scheduled, as Emitted for the outbox).
		field.Uint64("transaction_id").Optional().Immutable().
			SchemaType(map[string]string{dialect.Postgres: "xid8"}).
			Annotations(entsql.DefaultExprs(map[string]string{dialect.Postgres: "pg_current_xact_id()"})),
		field.Time("cancelled_at").SchemaType(timestamp()).Optional().Nillable().
			Comment("set by Cancel: the event is never sent; kept to be seen, removed by retention like delivered events"),
	}
}

// Indexes: the relay reads the earliest pending events, whatever the
// number waiting or cancelled.
func (ScheduledEvent) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("deliver_at", "id").
			Annotations(entsql.IndexWhere("cancelled_at IS NULL")).
			StorageKey("outbox_scheduled_events_due"),
		index.Fields("cancelled_at").
			Annotations(entsql.IndexWhere("cancelled_at IS NOT NULL")).
			StorageKey("outbox_scheduled_events_cancelled"),
	}
}
