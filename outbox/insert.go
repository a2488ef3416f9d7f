package outbox

import (
	stdsql "database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// NotifyChannel is the LISTEN/NOTIFY channel of an outbox table. Emit
// notifies it in the emitting transaction, so the wake-up is sent when,
// and only if, the transaction commits; the fast relay listens on it.
func NotifyChannel(table string) string { return table }

// InsertQuery builds the INSERT of params.Msgs into table, one row per
// message, as Emit writes them (the compatible relay path's schema adapter
// uses it too). The message UUID is the event id;
// a row whose event id is already present is skipped (ON CONFLICT DO
// NOTHING) so that a duplicate does not abort the caller's transaction.
func InsertQuery(table string, params wsql.InsertQueryParams) (wsql.Query, error) {
	q, err := insertQuery(table, params)
	if err != nil {
		return wsql.Query{}, fmt.Errorf("outbox: %w", err)
	}
	return q, nil
}

// insertQuery is InsertQuery without the package prefix on its errors,
// which the writer's errors carry already.
func insertQuery(table string, params wsql.InsertQueryParams) (wsql.Query, error) {
	const perRow = 8
	var (
		q    strings.Builder
		args = make([]any, 0, perRow*len(params.Msgs))
	)
	q.WriteString("WITH inserted AS (INSERT INTO " + pgsql.QuoteIdent(table) +
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
		pgsql.QuoteLiteral(NotifyChannel(table)) + ", '') FROM inserted")
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

// writeAdapter is the watermill-sql schema adapter of the writer: it only
// inserts (the relay reads with adapters of its own).
type writeAdapter struct{ table string }

func (a writeAdapter) InsertQuery(params wsql.InsertQueryParams) (wsql.Query, error) {
	return insertQuery(a.table, params)
}

var errWriteOnly = errors.New("outbox: the outbox writer does not read")

func (writeAdapter) SelectQuery(wsql.SelectQueryParams) (wsql.Query, error) {
	return wsql.Query{}, errWriteOnly
}

func (writeAdapter) UnmarshalMessage(wsql.UnmarshalMessageParams) (wsql.Row, error) {
	return wsql.Row{}, errWriteOnly
}

// SchemaInitializingQueries returns nothing: ent's migration owns the table.
func (writeAdapter) SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams) ([]wsql.Query, error) {
	return nil, nil
}

func (writeAdapter) SubscribeIsolationLevel() stdsql.IsolationLevel { return stdsql.LevelReadCommitted }
