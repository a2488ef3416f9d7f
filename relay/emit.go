package relay

import (
	"context"
	stdsql "database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/events"
)

// Event is one event to write to the outbox, as the generated Emit methods
// hand it over: the payload is already validated and encoded.
type Event struct {
	Name          string
	Version       int
	Topic         string
	AggregateType string
	AggregateID   string
	Payload       []byte // JSON
}

// Emit writes ev as an outbox row in the transaction that drv belongs to.
// The row goes through watermill-sql's Publisher with SchemaAdapter, so it
// lands in that transaction and nowhere else: it becomes visible to the
// relay when the transaction commits and disappears if it rolls back.
//
// drv must be the driver of an ent transaction; generated code checks that
// before calling. table is the outbox table name.
func Emit(ctx context.Context, drv dialect.ExecQuerier, table string, ev Event, cfg events.EmitConfig) error {
	if ev.AggregateID == "" {
		return &events.ValidationError{Event: ev.Name, Version: ev.Version, Reason: "aggregate id is empty"}
	}
	msg, err := NewMessage(ev, cfg)
	if err != nil {
		return err
	}
	msg.SetContext(ctx)

	exec := &entExecutor{drv: drv}
	pub, err := wsql.NewPublisher(exec, wsql.PublisherConfig{SchemaAdapter: SchemaAdapter{Table: table}}, nil)
	if err != nil {
		return fmt.Errorf("entoutbox: creating SQL publisher: %w", err)
	}
	if err := pub.Publish(ev.Topic, msg); err != nil {
		return fmt.Errorf("entoutbox: writing %q event %s: %w", ev.Name, msg.UUID, err)
	}
	if exec.rowsAffected == 0 {
		return fmt.Errorf("%w: %s (%q)", events.ErrDuplicateEventID, msg.UUID, ev.Name)
	}
	return nil
}

// NewMessage builds the Watermill message of ev: the event id (cfg's, or a
// new UUIDv7) as UUID, the payload, and the headers plus the outbox
// metadata. It is what Emit writes and what the relay publishes.
func NewMessage(ev Event, cfg events.EmitConfig) (*message.Message, error) {
	id := cfg.EventID
	if id == uuid.Nil {
		var err error
		if id, err = uuid.NewV7(); err != nil {
			return nil, fmt.Errorf("entoutbox: generating event id: %w", err)
		}
	}
	md := make(message.Metadata, len(cfg.Headers)+4)
	for k, v := range cfg.Headers {
		if strings.HasPrefix(k, events.ReservedPrefix) {
			return nil, &events.ValidationError{Event: ev.Name, Version: ev.Version,
				Reason: fmt.Sprintf("header %q uses the reserved prefix %q", k, events.ReservedPrefix)}
		}
		md[k] = v
	}
	md[events.MetaEventName] = ev.Name
	md[events.MetaEventVersion] = strconv.Itoa(ev.Version)
	md[events.MetaAggregateType] = ev.AggregateType
	md[events.MetaAggregateID] = ev.AggregateID
	msg := message.NewMessage(id.String(), ev.Payload)
	msg.Metadata = md
	return msg, nil
}

// entExecutor lets watermill-sql run on an ent driver: an ent transaction
// does not satisfy wsql.ContextExecutor as it is. It remembers the rows
// affected by the last statement, which tells Emit about a duplicate id.
type entExecutor struct {
	drv          dialect.ExecQuerier
	rowsAffected int64
}

func (e *entExecutor) ExecContext(ctx context.Context, query string, args ...any) (wsql.Result, error) {
	var res stdsql.Result
	if err := e.drv.Exec(ctx, query, args, &res); err != nil {
		return nil, err
	}
	if res == nil {
		return nil, errors.New("driver returned no result")
	}
	n, err := res.RowsAffected()
	if err != nil {
		return nil, err
	}
	e.rowsAffected = n
	return res, nil
}

func (e *entExecutor) QueryContext(ctx context.Context, query string, args ...any) (wsql.Rows, error) {
	rows := &entsql.Rows{}
	if err := e.drv.Query(ctx, query, args, rows); err != nil {
		return nil, err
	}
	return rows, nil
}
