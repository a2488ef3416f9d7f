package compatpath

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/trace"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/relay/internal/engine"
)

// forwarderTopic is the name the compatible path subscribes under. The
// outbox is one table whatever the topic; the name only keys the offsets.
const forwarderTopic = "outbox"

// pathName is the compatible path's name in the logs (the relay's
// PathCompatible).
const pathName = "compatible"

// Settings is what the compatible path takes of the relay's settings, the
// defaults filled in.
type Settings struct {
	// Publishing is what the engine would take: the publisher, logger,
	// topic prefix, tracer, spans' messaging.system and metrics.
	Publishing             engine.Settings
	DB                     *sql.DB
	Table, DeadLetterTable string
	Dialect                outboxdb.Dialect // PostgreSQL's or MySQL's
	ConsumerGroup          string
	PollInterval           time.Duration
	RetryInterval          time.Duration // every wait after a failed publish
	BatchSize              int
	CloseTimeout           time.Duration
	Attributes             engine.Attributes // what the relay's CloudEvents adds to every message
}

// forwarding is a run of the compatible path.
type forwarding struct{ cfg Settings }

// Run is the stock Watermill outbox, until ctx ends: watermill-sql's
// subscriber, with our schema and offsets adapters, feeding
// components/forwarder as it is. Our adapters rebuild the forwarder's
// envelope from the row's columns when reading, so the row itself stays
// queryable JSONB.
func Run(ctx context.Context, cfg Settings) error {
	f := &forwarding{cfg: cfg}
	pub := cfg.Publishing
	schema, offsets := f.adapters()
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromStdSQL(cfg.DB), wsql.SubscriberConfig{
		ConsumerGroup:    cfg.ConsumerGroup,
		PollInterval:     cfg.PollInterval,
		ResendInterval:   cfg.RetryInterval,
		RetryInterval:    cfg.RetryInterval,
		SchemaAdapter:    schema,
		OffsetsAdapter:   offsets,
		InitializeSchema: true,
	}, pub.Logger)
	if err != nil {
		return fmt.Errorf("relay: creating the watermill-sql subscriber: %w", err)
	}
	defer sub.Close()

	fwd, err := forwarder.NewForwarder(sub, pub.Publisher, pub.Logger, forwarder.Config{
		ForwarderTopic: forwarderTopic,
		CloseTimeout:   cfg.CloseTimeout,
		Middlewares:    []message.HandlerMiddleware{f.setAsideBrokenRows},
	})
	if err != nil {
		return fmt.Errorf("relay: creating the forwarder: %w", err)
	}
	go func() {
		select {
		case <-fwd.Running():
			pub.Logger.Info("Relay running", map[string]any{"path": pathName, "table": cfg.Table})
		case <-ctx.Done():
		}
	}()
	if err := fwd.Run(ctx); err != nil {
		return fmt.Errorf("relay: forwarder stopped: %w", err)
	}
	return nil
}

// adapters are the schema and offsets adapters of the database.
func (f *forwarding) adapters() (wsql.SchemaAdapter, wsql.OffsetsAdapter) {
	cfg := f.cfg
	if cfg.Dialect == outboxdb.MySQL {
		return mysqlSchema{tables: f.tables(), batch: cfg.BatchSize, prefix: cfg.Publishing.TopicPrefix,
			attributes: cfg.Attributes}, newMySQLOffsets(f.tables())
	}
	return SchemaAdapter{Table: cfg.Table, SelectBatchSize: cfg.BatchSize, TopicPrefix: cfg.Publishing.TopicPrefix,
		Attributes: cfg.Attributes}, newOffsetsAdapter(cfg.Table)
}

// tables are the relay's tables, in its database's dialect.
func (f *forwarding) tables() outboxdb.Tables {
	t := outboxdb.New(f.cfg.Table, f.cfg.DeadLetterTable)
	t.Dialect = f.cfg.Dialect
	return t
}

// setAsideBrokenRows moves a row that cannot become a message to the dead
// letters, in the subscriber's own transaction, instead of letting the
// forwarder retry it forever and block everything behind it.
func (f *forwarding) setAsideBrokenRows(next message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		reason := msg.Metadata.Get(MetaRowError)
		if reason == "" {
			return f.forwardObserved(next, msg)
		}
		tx, ok := wsql.TxFromContext(msg.Context())
		if !ok {
			return nil, fmt.Errorf("relay: no transaction in the context of broken row %s", msg.UUID)
		}
		id, err := rowID(msg)
		if err != nil {
			return nil, err
		}
		d := engine.Malformed(reason, 0)
		if _, err := f.tables().MoveToDeadLetters(msg.Context(), txExecer{tx}, id, d.Reason, d.Attempts); err != nil {
			return nil, fmt.Errorf("relay: %w", err)
		}
		engine.DeadLettered(f.cfg.Publishing.Metrics, f.cfg.Publishing.Logger, pathName, f.cfg.ConsumerGroup, f.brokenRow(id, msg), d)
		return nil, nil
	}
}

// txExecer runs outboxdb's statements in a watermill-sql transaction.
type txExecer struct{ tx wsql.Tx }

func (e txExecer) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	res, err := e.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return txResult{res}, nil
}

// txResult is a watermill-sql result as database/sql's: it has no last
// insert id (the moves to the dead letters ask for none).
type txResult struct{ wsql.Result }

func (txResult) LastInsertId() (int64, error) {
	return 0, errors.New("relay: a watermill-sql result has no last insert id")
}

// brokenRow is what the log of a broken row's dead letter says of it,
// read from the forwarder envelope of msg, row id.
func (f *forwarding) brokenRow(id int64, msg *message.Message) *engine.Row {
	var env forwarderEnvelope
	if json.Unmarshal(msg.Payload, &env) != nil {
		env = forwarderEnvelope{UUID: msg.UUID}
	}
	return env.row(id, f.cfg.Publishing.TopicPrefix)
}

// forwardObserved runs the forwarder's handler on envelope msg, which
// publishes the event, with the relay's metrics and send span around it.
// It reads the envelope only when one of them is on.
func (f *forwarding) forwardObserved(next message.HandlerFunc, msg *message.Message) ([]*message.Message, error) {
	pub := f.cfg.Publishing
	tracer := pub.Tracer.Get()
	if pub.Metrics == nil && tracer == nil {
		return next(msg)
	}
	var env forwarderEnvelope
	if err := json.Unmarshal(msg.Payload, &env); err != nil {
		return next(msg) // the forwarder says what is wrong with it
	}
	var span trace.Span
	if tracer != nil {
		out := message.NewMessage(env.UUID, env.Payload)
		out.Metadata = env.Metadata
		if out.Metadata == nil {
			out.Metadata = message.Metadata{}
		}
		span = engine.StartSend(tracer, pub.System, env.DestinationTopic, out)
		env.Metadata = out.Metadata
		if b, err := json.Marshal(env); err == nil {
			msg.Payload = b
		}
	}
	started := time.Now()
	produced, err := next(msg)
	rowTopic := strings.TrimPrefix(env.DestinationTopic, pub.TopicPrefix)
	if m := pub.Metrics; m != nil {
		m.Published(rowTopic, time.Since(started), err)
		if err == nil {
			m.Delivered(rowTopic, engine.CreatedAt(env.Metadata))
		}
	}
	if span != nil {
		engine.EndSpan(span, err)
	}
	return produced, err
}

// offsetsAdapter keeps the compatible path's read position in one table,
// and marks the rows it acknowledges as delivered in the same statement.
type offsetsAdapter struct {
	wsql.DefaultPostgreSQLOffsetsAdapter
	table string
}

func newOffsetsAdapter(table string) offsetsAdapter {
	offsets := pgsql.QuoteIdent(outboxdb.New(table, "").RelayOffsets())
	return offsetsAdapter{
		DefaultPostgreSQLOffsetsAdapter: wsql.DefaultPostgreSQLOffsetsAdapter{
			GenerateMessagesOffsetsTableName: func(string) string { return offsets },
		},
		table: table,
	}
}

// AckMessageQuery advances the offset and stamps delivered_at on every row
// of the batch up to the last acknowledged one.
func (a offsetsAdapter) AckMessageQuery(params wsql.AckMessageQueryParams) (wsql.Query, error) {
	q, err := a.DefaultPostgreSQLOffsetsAdapter.AckMessageQuery(params)
	if err != nil {
		return q, err
	}
	n := len(q.Args) + 1
	q.Query = outboxdb.New(a.table, "").CompatAckDelivered(n) + q.Query
	q.Args = append(q.Args, ackedIDs(params))
	return q, nil
}
