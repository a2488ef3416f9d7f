package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// AggregateSequenceTable is the default table name of the per-aggregate
// event counters.
const AggregateSequenceTable = "outbox_aggregate_sequences"

// AggregateSequence counts the events of one aggregate on one topic. Emit
// takes the next numbers from it in the writing transaction: the row lock
// holds the aggregate's other writers until the transaction ends, so the
// numbers are dense, without gaps from rolled-back transactions, and in
// commit order. Rows are never deleted: a number must not be given twice.
type AggregateSequence struct {
	ent.Schema
}

// Annotations names the table.
func (AggregateSequence) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: AggregateSequenceTable}}
}

// Fields of a counter.
func (AggregateSequence) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.String("topic").Immutable(),
		field.String("aggregate_type").Immutable(),
		field.String("aggregate_id").Immutable(),
		field.Int64("last_seq").Positive().Comment("the number of the aggregate's last event on the topic"),
	}
}

// Indexes: one counter per topic and aggregate, the key Emit upserts on.
func (AggregateSequence) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("topic", "aggregate_type", "aggregate_id").Unique().StorageKey("outbox_aggregate_sequences_key"),
	}
}
