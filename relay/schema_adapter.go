package relay

import (
	stdsql "database/sql"
	"maps"
	"strconv"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/outbox"
	"github.com/entoutbox/entoutbox/schema"
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
}

var _ wsql.SchemaAdapter = SchemaAdapter{}

func (s SchemaAdapter) tableName() string {
	if s.Table == "" {
		return schema.OutboxTable
	}
	return s.Table
}

func (s SchemaAdapter) table() string { return pgsql.QuoteIdent(s.tableName()) }

// InsertQuery is the writer's INSERT (see outbox.InsertQuery), so that a
// watermill-sql publisher with this adapter writes rows as Emit does.
func (s SchemaAdapter) InsertQuery(params wsql.InsertQueryParams) (wsql.Query, error) {
	return outbox.InsertQuery(s.tableName(), params)
}

// SchemaInitializingQueries returns nothing: ent's migration owns the table.
func (s SchemaAdapter) SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams) ([]wsql.Query, error) {
	return nil, nil
}

// SubscribeIsolationLevel is the level watermill-sql's subscriber reads at.
func (s SchemaAdapter) SubscribeIsolationLevel() stdsql.IsolationLevel {
	return stdsql.LevelRepeatableRead
}

// metadataOf rebuilds the message metadata of a row.
func metadataOf(name string, version int, aggType, aggID string, headers map[string]string) map[string]string {
	md := make(map[string]string, len(headers)+4)
	maps.Copy(md, headers)
	md[events.MetaEventName] = name
	md[events.MetaEventVersion] = strconv.Itoa(version)
	md[events.MetaAggregateType] = aggType
	md[events.MetaAggregateID] = aggID
	return md
}
