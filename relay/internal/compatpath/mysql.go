package compatpath

import (
	stdsql "database/sql"
	"encoding/json"
	"errors"
	"fmt"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/relay/internal/engine"
)

// The compatible path on MySQL (MySQL 8, MariaDB 10.6+), modelled on
// watermill-sql's DefaultMySQLSchema and DefaultMySQLOffsetsAdapter.
//
// watermill-sql's MySQL schema reads the rows after the group's offset,
// an id. MySQL takes an id when a row is written, not when it commits:
// a transaction may commit a row below an id already acknowledged, and a
// read after that offset would skip it for good. So here the offset is
// not a read position: every read starts at the first row not yet
// delivered (delivered_at, which the ack stamps), in id order, as the
// poll path reads. The group's offsets row is the lock its relays take
// turns with, and records the last id acknowledged.

// mysqlSchema is the compatible path's schema adapter on MySQL: the read
// side only (the relay never writes through it).
type mysqlSchema struct {
	tables     outboxdb.Tables // in the MySQL dialect
	batch      int
	prefix     string
	attributes engine.Attributes
}

var _ wsql.SchemaAdapter = mysqlSchema{}

// InsertQuery refuses: Emit writes the rows, not a watermill-sql
// publisher.
func (s mysqlSchema) InsertQuery(wsql.InsertQueryParams) (wsql.Query, error) {
	return wsql.Query{}, errors.New("relay: the compatible path's MySQL schema reads the outbox; Emit writes it")
}

// SchemaInitializingQueries returns nothing: ent's migration owns the table.
func (s mysqlSchema) SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams) ([]wsql.Query, error) {
	return nil, nil
}

// SubscribeIsolationLevel is READ COMMITTED: each read sees what
// committed before it, and no read or write of the path locks a gap of
// the outbox, where Emit inserts. (watermill-sql's MySQL schema reads
// SERIALIZABLE, whose reads lock the gaps they scan: Emit would wait for
// the broker's publishes.)
func (s mysqlSchema) SubscribeIsolationLevel() stdsql.IsolationLevel {
	return stdsql.LevelReadCommitted
}

// SelectQuery reads the first undelivered rows in id order, under the
// consumer group's lock (outboxdb's CompatSelect).
func (s mysqlSchema) SelectQuery(params wsql.SelectQueryParams) (wsql.Query, error) {
	next, err := params.OffsetsAdapter.NextOffsetQuery(wsql.NextOffsetQueryParams{
		Topic:         params.Topic,
		ConsumerGroup: params.ConsumerGroup,
	})
	if err != nil {
		return wsql.Query{}, err
	}
	batch := s.batch
	if batch <= 0 {
		batch = defaultSelectBatch
	}
	return wsql.Query{Query: s.tables.CompatSelect(next.Query, batch), Args: next.Args}, nil
}

// UnmarshalMessage turns a row into a forwarder envelope message, as on
// PostgreSQL (SchemaAdapter.UnmarshalMessage).
func (s mysqlSchema) UnmarshalMessage(params wsql.UnmarshalMessageParams) (wsql.Row, error) {
	var r engine.Row
	if err := params.Row.Scan(&r.ID, &r.EventID, &r.Name, &r.Version, &r.Topic, &r.AggregateType, &r.AggregateID,
		&r.Payload, &r.Headers, &r.ReadableFrom, &r.AggregateSeq, &r.CreatedAt); err != nil {
		return wsql.Row{}, fmt.Errorf("could not scan outbox row: %w", err)
	}
	return envelopeRow(&r, s.attributes, s.prefix)
}

// mysqlOffsets is the compatible path's offsets adapter on MySQL:
// watermill-sql's own, for its table (made at the first subscribe) and
// the consumed mark, with the lock, the group's row and the ack of
// outboxdb.
type mysqlOffsets struct {
	wsql.DefaultMySQLOffsetsAdapter
	tables outboxdb.Tables // in the MySQL dialect
}

func newMySQLOffsets(tables outboxdb.Tables) mysqlOffsets {
	offsets := tables.Quote(tables.RelayOffsets())
	return mysqlOffsets{
		DefaultMySQLOffsetsAdapter: wsql.DefaultMySQLOffsetsAdapter{
			GenerateMessagesOffsetsTableName: func(string) string { return offsets },
		},
		tables: tables,
	}
}

// bound is statement s of a's tables with args, its parameters made
// MySQL's.
func (a mysqlOffsets) bound(s *outboxdb.Statement, args ...any) wsql.Query {
	q, args := outboxdb.Bind(outboxdb.MySQL, s.SQL(a.tables), args)
	return wsql.Query{Query: q, Args: args}
}

// BeforeSubscribingQueries makes the group's row: the lock of
// NextOffsetQuery then always finds one (a locking read of a missing key
// would lock nothing at READ COMMITTED).
func (a mysqlOffsets) BeforeSubscribingQueries(params wsql.BeforeSubscribingQueriesParams) ([]wsql.Query, error) {
	return []wsql.Query{a.bound(outboxdb.CompatGroupRow, params.ConsumerGroup)}, nil
}

// NextOffsetQuery locks the group's row and reads 0: every read starts at
// the first undelivered row.
func (a mysqlOffsets) NextOffsetQuery(params wsql.NextOffsetQueryParams) (wsql.Query, error) {
	return a.bound(outboxdb.CompatNextOffset, params.ConsumerGroup), nil
}

// AckMessageQuery stamps delivered_at on every row of the batch up to the
// last acknowledged one, and records its id as the group's offset.
func (a mysqlOffsets) AckMessageQuery(params wsql.AckMessageQueryParams) (wsql.Query, error) {
	ids, err := json.Marshal(ackedIDs(params))
	if err != nil {
		return wsql.Query{}, fmt.Errorf("relay: the ids acknowledged: %w", err)
	}
	return a.bound(outboxdb.CompatAck, string(ids), params.ConsumerGroup, params.LastRow.Offset), nil
}

// ackedIDs are the ids of the rows of a batch up to the last one
// acknowledged.
func ackedIDs(params wsql.AckMessageQueryParams) []int64 {
	var ids []int64
	for _, row := range params.Rows {
		ids = append(ids, row.Offset)
		if row.Offset == params.LastRow.Offset {
			break
		}
	}
	return ids
}
