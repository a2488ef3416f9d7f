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

// OutboxTable is the default table name of the outbox.
const OutboxTable = "outbox_events"

// Outbox is the outbox table: one row per emitted event, written in the
// same transaction as the business change and read by the relay.
type Outbox struct {
	ent.Schema
}

// Annotations names the table.
func (Outbox) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: OutboxTable}}
}

// Fields of the outbox row. Columns with database defaults keep the raw
// INSERT issued by Emit short and let the database stamp time and
// transaction id.
func (Outbox) Fields() []ent.Field {
	return []ent.Field{
		// id is the insertion sequence; the relay orders by it.
		field.Int64("id"),
		field.UUID("event_id", uuid.UUID{}).Unique().Immutable().
			Comment("stable id of the event: the message UUID on every broker and the dedupe key of consumers"),
		field.String("event_name").Immutable().Comment("stable wire name, e.g. order.paid"),
		field.Int("event_version").Immutable().Positive(),
		field.String("topic").Immutable().Comment("destination topic on the broker"),
		field.String("aggregate_type").Immutable(),
		field.String("aggregate_id").Immutable().Comment("ordering and partition key"),
		field.JSON("payload", json.RawMessage{}).Immutable().
			SchemaType(jsonb()).Comment("the event payload as queryable JSON"),
		field.JSON("headers", map[string]string{}).Optional().
			SchemaType(jsonb()).Comment("message metadata: trace context, correlation ids"),
		// readable_from is the oldest version whose consumers can read the
		// payload as theirs; NULL when only consumers of event_version can.
		// It lets a consumer one version behind handle a newer event during
		// a rolling deploy.
		field.Int("readable_from").Optional().Nillable().Immutable().Positive(),
		// aggregate_seq is the event's place among its aggregate's events on
		// its topic: 1, 2, 3..., without gaps over committed transactions
		// (Emit counts in the AggregateSequence table, whose row lock
		// orders the aggregate's writers). Consumers apply an aggregate's
		// events in this order whatever order the broker hands them out in.
		// Rows written without Emit are numbered by a trigger the generated
		// migration installs (outbox.Migrate). NULL without the sequence
		// table.
		field.Int64("aggregate_seq").Optional().Nillable().Immutable().Positive(),
		field.Time("created_at").SchemaType(timestamp()).Default(time.Now).Immutable().
			Annotations(now()),
		// transaction_id lets the compatible (watermill-sql) read path order
		// rows by commit visibility, and the fast relay find the rows of
		// transactions that commit late.
		field.Uint64("transaction_id").Optional().Immutable().
			SchemaType(map[string]string{dialect.Postgres: "xid8"}).
			Annotations(entsql.DefaultExprs(map[string]string{dialect.Postgres: "pg_current_xact_id()"})),
		// Delivery state, owned by the relay.
		// Which relay holds which aggregate lives in the relay's own lease
		// table, so claiming rows never rewrites them.
		field.Time("available_at").SchemaType(timestamp()).Default(time.Now).
			Annotations(now()).
			Comment("when the relay tries the event next: pushed back after a failed publish"),
		field.Int("attempts").Default(0).NonNegative().Comment("failed publishes so far"),
		field.Time("delivered_at").SchemaType(timestamp()).Optional().Nillable().
			Comment("set when the broker acknowledged the message"),
		field.Text("last_error").Optional(),
	}
}

// Indexes keep the relay's queries on undelivered rows cheap while the table
// retains millions of delivered ones, and are few: each costs every write.
func (Outbox) Indexes() []ent.Index {
	return []ent.Index{
		// The fast relay claims undelivered rows in id order; the index stays
		// small however many delivered rows are retained. (It reads each
		// aggregate from one relay only, so it needs no index by aggregate.)
		index.Fields("id").
			Annotations(entsql.IndexWhere("delivered_at IS NULL")).
			StorageKey("outbox_events_pending"),
		// The compatible (watermill-sql) path reads in commit order.
		index.Fields("transaction_id", "id").StorageKey("outbox_events_commit_order"),
		// No more: every index is written again when a row is marked
		// delivered (delivered_at is in the pending index's predicate, so
		// that update is never HOT). Retention cleanup walks the primary key.
	}
}

func jsonb() map[string]string { return map[string]string{dialect.Postgres: "jsonb"} }

// timestamp is a time column's type where ent's own would lose time:
// MySQL's timestamp keeps whole seconds (a scheduled event rounded down
// would be due early) and ends in 2038.
func timestamp() map[string]string { return map[string]string{dialect.MySQL: "datetime(6)"} }

// now is a time column's default: the database's clock (to the
// microsecond on MySQL, whose datetime(6) refuses a default of less).
func now() schema.Annotation {
	return entsql.DefaultExprs(map[string]string{dialect.Postgres: "CURRENT_TIMESTAMP", dialect.SQLite: "CURRENT_TIMESTAMP",
		dialect.MySQL: "CURRENT_TIMESTAMP(6)"})
}
