package relay

import (
	stdsql "database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgsql"
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

// InsertQuery inserts one row per message. The message UUID is the event id;
// a row whose event id is already present is skipped (ON CONFLICT DO
// NOTHING) so that a duplicate does not abort the caller's transaction.
func (s SchemaAdapter) InsertQuery(params wsql.InsertQueryParams) (wsql.Query, error) {
	const perRow = 8
	var (
		q    strings.Builder
		args = make([]any, 0, perRow*len(params.Msgs))
	)
	q.WriteString("WITH inserted AS (INSERT INTO " + s.table() +
		" (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers) VALUES ")
	for i, msg := range params.Msgs {
		version, err := strconv.Atoi(msg.Metadata.Get(events.MetaEventVersion))
		if err != nil {
			return wsql.Query{}, fmt.Errorf("message %s: metadata %s is not a number: %w", msg.UUID, events.MetaEventVersion, err)
		}
		headers, err := rowHeaders(msg.Metadata)
		if err != nil {
			return wsql.Query{}, fmt.Errorf("message %s: %w", msg.UUID, err)
		}
		if i > 0 {
			q.WriteByte(',')
		}
		n := i * perRow
		fmt.Fprintf(&q, "($%d,$%d,$%d,$%d,$%d,$%d,$%d::jsonb,$%d::jsonb)", n+1, n+2, n+3, n+4, n+5, n+6, n+7, n+8)
		args = append(args, msg.UUID, msg.Metadata.Get(events.MetaEventName), version, params.Topic,
			msg.Metadata.Get(events.MetaAggregateType), msg.Metadata.Get(events.MetaAggregateID),
			string(msg.Payload), headers)
	}
	// One statement: the insert, and a notification the fast relay gets
	// at commit. It returns one row per inserted row, so the rows affected
	// still tell a duplicate apart.
	q.WriteString(" ON CONFLICT (event_id) DO NOTHING RETURNING 1) SELECT pg_notify(" +
		pgsql.QuoteLiteral(notifyChannel(s.tableName())) + ", '') FROM inserted")
	return wsql.Query{Query: q.String(), Args: args}, nil
}

// rowHeaders is the metadata minus the keys that have columns of their own,
// as JSON, or nil when nothing is left.
func rowHeaders(md map[string]string) (any, error) {
	var rest map[string]string
	for k, v := range md {
		if strings.HasPrefix(k, events.ReservedPrefix) {
			continue
		}
		if rest == nil {
			rest = make(map[string]string, len(md))
		}
		rest[k] = v
	}
	if rest == nil {
		return nil, nil
	}
	b, err := json.Marshal(rest)
	if err != nil {
		return nil, fmt.Errorf("encoding headers: %w", err)
	}
	return string(b), nil
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
