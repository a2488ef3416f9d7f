package relay

import (
	stdsql "database/sql"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"

	"github.com/entoutbox/entoutbox/relay/internal/compatpath"
)

// SchemaAdapter is the watermill-sql SchemaAdapter for the entoutbox table on
// PostgreSQL. Unlike watermill-sql's default schema (one table per topic, an
// opaque payload) all events share one table whose columns a person can
// query: the destination topic, event name and aggregate are columns and the
// payload is JSONB.
//
// The table itself is created by ent's migration (see package schema), so
// SchemaInitializingQueries returns nothing.
type SchemaAdapter struct {
	// Table is the outbox table; schema.OutboxTable when empty.
	Table string
	// SelectBatchSize is how many rows the compatible read path fetches at
	// once; 100 when zero.
	SelectBatchSize int
	// TopicPrefix is prepended to every destination topic when reading.
	TopicPrefix string
	// CloudEvents, when set, adds CloudEvents attributes to every message
	// read (see CloudEvents).
	CloudEvents *CloudEvents
}

var _ wsql.SchemaAdapter = SchemaAdapter{}

// adapter is the compatible path's adapter, which does the work.
func (s SchemaAdapter) adapter() compatpath.SchemaAdapter {
	return compatpath.SchemaAdapter{Table: s.Table, SelectBatchSize: s.SelectBatchSize, TopicPrefix: s.TopicPrefix,
		Attributes: s.CloudEvents.attributes()}
}

// InsertQuery is the writer's INSERT (see outbox.InsertQuery), so that a
// watermill-sql publisher with this adapter writes rows as Emit does: each
// message carries the outbox metadata (outbox.Metadata), and the rest of
// its metadata becomes the row's headers.
func (s SchemaAdapter) InsertQuery(params wsql.InsertQueryParams) (wsql.Query, error) {
	return s.adapter().InsertQuery(params)
}

// SchemaInitializingQueries returns nothing: ent's migration owns the table.
func (s SchemaAdapter) SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams) ([]wsql.Query, error) {
	return nil, nil
}

// SubscribeIsolationLevel is the level watermill-sql's subscriber reads at.
func (s SchemaAdapter) SubscribeIsolationLevel() stdsql.IsolationLevel {
	return s.adapter().SubscribeIsolationLevel()
}

// SelectQuery returns the next committed rows after the consumer group's
// offset, in commit order. Like watermill-sql's default PostgreSQL schema it
// orders by (transaction_id, id) and only reads transactions older than the
// snapshot's xmin, so a row committed late by a long transaction is never
// skipped; the price is that a long transaction anywhere on the server
// stalls this path (the fast relay does not have that limit).
func (s SchemaAdapter) SelectQuery(params wsql.SelectQueryParams) (wsql.Query, error) {
	return s.adapter().SelectQuery(params)
}

// UnmarshalMessage turns a row into a forwarder envelope message: the
// envelope of the row's message as every read path builds it. A row that
// no broker can take (headers that are not a JSON object of strings, an
// empty topic...) still becomes a message: its metadata carries the reason
// under MetaRowError so the relay sets it aside instead of retrying it
// forever.
func (s SchemaAdapter) UnmarshalMessage(params wsql.UnmarshalMessageParams) (wsql.Row, error) {
	return s.adapter().UnmarshalMessage(params)
}

// MetaRowError is set on a message read from a row that cannot be relayed
// as it is; its value is the reason.
const MetaRowError = compatpath.MetaRowError

// MetaRowID carries the outbox row id on messages read by the compatible
// path, so a broken row can be set aside.
const MetaRowID = compatpath.MetaRowID
