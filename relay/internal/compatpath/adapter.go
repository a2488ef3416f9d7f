package compatpath

import (
	stdsql "database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/outbox"
	"github.com/entoutbox/entoutbox/relay/internal/engine"
	"github.com/entoutbox/entoutbox/schema"
)

// SchemaAdapter is the watermill-sql SchemaAdapter for the outbox table
// on PostgreSQL: the relay's public SchemaAdapter, whose documentation
// says what it does.
type SchemaAdapter struct {
	// Table is the outbox table; schema.OutboxTable when empty.
	Table string
	// SelectBatchSize is how many rows the compatible read path fetches at
	// once; 100 when zero.
	SelectBatchSize int
	// TopicPrefix is prepended to every destination topic when reading.
	TopicPrefix string
	// Attributes are added to every message read (the relay's
	// CloudEvents).
	Attributes engine.Attributes
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
// watermill-sql publisher with this adapter writes rows as Emit does: each
// message carries the outbox metadata (outbox.Metadata), and the rest of
// its metadata becomes the row's headers.
func (s SchemaAdapter) InsertQuery(params wsql.InsertQueryParams) (wsql.Query, error) {
	rows := make([]outbox.Row, len(params.Msgs))
	for i, msg := range params.Msgs {
		r, err := rowOf(params.Topic, msg)
		if err != nil {
			return wsql.Query{}, err
		}
		rows[i] = r
	}
	q, args, err := outbox.InsertQuery(s.tableName(), rows)
	return wsql.Query{Query: q, Args: args}, err
}

// rowOf is the outbox row of a message bound for topic.
func rowOf(topic string, msg *message.Message) (outbox.Row, error) {
	id, err := uuid.Parse(msg.UUID)
	if err != nil {
		return outbox.Row{}, fmt.Errorf("relay: message %s: the UUID is the event id, and not a UUID: %w", msg.UUID, err)
	}
	version, err := strconv.Atoi(msg.Metadata.Get(events.MetaEventVersion))
	if err != nil {
		return outbox.Row{}, fmt.Errorf("relay: message %s: metadata %s is not a number: %w", msg.UUID,
			events.MetaEventVersion, err)
	}
	var headers map[string]string
	for k, v := range msg.Metadata {
		if strings.HasPrefix(k, events.ReservedPrefix) {
			continue
		}
		if headers == nil {
			headers = map[string]string{}
		}
		headers[k] = v
	}
	// A message without (or with a garbled) readable_from is read by
	// consumers of its own version only.
	readableFrom, _ := strconv.Atoi(msg.Metadata.Get(events.MetaReadableFrom))
	return outbox.Row{EventID: id, Headers: headers, Event: outbox.Event{Name: msg.Metadata.Get(events.MetaEventName),
		Version: version, Topic: topic, AggregateType: msg.Metadata.Get(events.MetaAggregateType),
		AggregateID: msg.Metadata.Get(events.MetaAggregateID), Payload: msg.Payload, ReadableFrom: readableFrom}}, nil
}

// SchemaInitializingQueries returns nothing: ent's migration owns the table.
func (s SchemaAdapter) SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams) ([]wsql.Query, error) {
	return nil, nil
}

// SubscribeIsolationLevel is the level watermill-sql's subscriber reads at.
func (s SchemaAdapter) SubscribeIsolationLevel() stdsql.IsolationLevel {
	return stdsql.LevelRepeatableRead
}

// The read side of SchemaAdapter, used by the compatible relay path: the
// stock watermill-sql subscriber reads the outbox table and feeds
// Watermill's forwarder component unchanged.

// forwarderEnvelope mirrors the JSON envelope of Watermill's
// components/forwarder. The row stays queryable JSONB; the envelope is built
// only when the row is read, so the forwarder can unwrap it as it is.
type forwarderEnvelope struct {
	DestinationTopic string            `json:"destination_topic"`
	UUID             string            `json:"uuid"`
	Payload          []byte            `json:"payload"`
	Metadata         map[string]string `json:"metadata"`
}

const defaultSelectBatch = 100

// SelectQuery returns the next committed rows after the consumer group's
// offset, in commit order. Like watermill-sql's default PostgreSQL schema it
// orders by (transaction_id, id) and only reads transactions older than the
// snapshot's xmin, so a row committed late by a long transaction is never
// skipped; the price is that a long transaction anywhere on the server
// stalls this path (the fast relay does not have that limit).
func (s SchemaAdapter) SelectQuery(params wsql.SelectQueryParams) (wsql.Query, error) {
	next, err := params.OffsetsAdapter.NextOffsetQuery(wsql.NextOffsetQueryParams{
		Topic:         params.Topic,
		ConsumerGroup: params.ConsumerGroup,
	})
	if err != nil {
		return wsql.Query{}, err
	}
	batch := s.SelectBatchSize
	if batch <= 0 {
		batch = defaultSelectBatch
	}
	q := outboxdb.New(s.tableName(), "").CompatSelect(next.Query, batch)
	return wsql.Query{Query: q, Args: next.Args}, nil
}

// UnmarshalMessage turns a row into a forwarder envelope message: the
// envelope of the row's message as every read path builds it (Row.Message).
// A row that no broker can take (headers that are not a JSON object of
// strings, an empty topic...) still becomes a message: its metadata
// carries the reason under MetaRowError so the relay sets it aside instead
// of retrying it forever.
func (s SchemaAdapter) UnmarshalMessage(params wsql.UnmarshalMessageParams) (wsql.Row, error) {
	var (
		r        engine.Row
		txID     wsql.XID8
		readable stdsql.NullInt64
		seq      stdsql.NullInt64
	)
	if err := params.Row.Scan(&r.ID, &txID, &r.EventID, &r.Name, &r.Version, &r.Topic,
		&r.AggregateType, &r.AggregateID, &r.Payload, &r.Headers, &r.CreatedAt, &readable, &seq); err != nil {
		return wsql.Row{}, fmt.Errorf("could not scan outbox row: %w", err)
	}
	r.ReadableFrom, r.AggregateSeq = int(readable.Int64), seq.Int64
	out, err := envelopeRow(&r, s.Attributes, s.TopicPrefix)
	if err != nil {
		return wsql.Row{}, err
	}
	out.ExtraData = map[string]any{"transaction_id": txID}
	return out, nil
}

// envelopeRow is what the subscriber reads of row r: its forwarder
// envelope, bound for the row's topic behind prefix, at the row's id. A
// row no broker can take says why under MetaRowError.
func envelopeRow(r *engine.Row, attrs engine.Attributes, prefix string) (wsql.Row, error) {
	rowErr := r.Check()
	msg := r.Message(attrs)
	env, err := json.Marshal(envelope(msg, prefix+r.Topic))
	if err != nil {
		return wsql.Row{}, fmt.Errorf("could not build forwarder envelope for event %s: %w", msg.UUID, err)
	}
	out := wsql.Row{Offset: r.ID, UUID: []byte(msg.UUID), Payload: env, Msg: message.NewMessage(msg.UUID, env)}
	out.Msg.Metadata.Set(MetaRowID, strconv.FormatInt(r.ID, 10))
	if rowErr != nil {
		out.Msg.Metadata.Set(MetaRowError, rowErr.Error())
	}
	return out, nil
}

// envelope is the forwarder envelope of msg, a row's message, bound for
// destination.
func envelope(msg *message.Message, destination string) forwarderEnvelope {
	return forwarderEnvelope{DestinationTopic: destination, UUID: msg.UUID, Payload: msg.Payload, Metadata: msg.Metadata}
}

// row is what the envelope says of row id, for the log of its dead
// letter: the inverse of envelope, as far as a log needs it.
func (e forwarderEnvelope) row(id int64, prefix string) *engine.Row {
	r := &engine.Row{ID: id, Topic: strings.TrimPrefix(e.DestinationTopic, prefix), Name: e.Metadata[events.MetaEventName],
		AggregateType: e.Metadata[events.MetaAggregateType], AggregateID: e.Metadata[events.MetaAggregateID]}
	r.EventID, _ = uuid.Parse(e.UUID)
	return r
}

// MetaRowError is set on a message read from a row that cannot be relayed
// as it is; its value is the reason.
const MetaRowError = events.ReservedPrefix + "row_error"

// MetaRowID carries the outbox row id on messages read by the compatible
// path, so a broken row can be set aside.
const MetaRowID = events.ReservedPrefix + "row_id"

func rowID(msg *message.Message) (int64, error) {
	id, err := strconv.ParseInt(msg.Metadata.Get(MetaRowID), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("relay: message %s has no row id: %w", msg.UUID, err)
	}
	return id, nil
}
