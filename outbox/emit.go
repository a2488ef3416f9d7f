package outbox

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

// eventMessage checks ev and builds its message.
func eventMessage(ev Event, cfg events.EmitConfig) (*message.Message, error) {
	// What a broker cannot carry is refused now, not retried by the relay
	// until it gives up; a NUL or invalid UTF-8 would fail the commit.
	if err := events.CheckAggregateID(ev.AggregateID); err != nil {
		return nil, &events.ValidationError{Event: ev.Name, Version: ev.Version, Reason: reason(err)}
	}
	// PostgreSQL's jsonb refuses \u0000; found now, not when the events
	// are written at commit.
	if hasJSONNul(ev.Payload) {
		return nil, &events.ValidationError{Event: ev.Name, Version: ev.Version,
			Reason: `payload holds a NUL character (\u0000), which PostgreSQL's jsonb cannot store`}
	}
	if err := events.CheckHeaders(cfg.Headers); err != nil {
		return nil, &events.ValidationError{Event: ev.Name, Version: ev.Version, Reason: reason(err)}
	}
	return NewMessage(ev, cfg)
}

// reason is the text of an error of events' checks without the package
// prefix, for the *events.ValidationError that names the event.
func reason(err error) string { return strings.TrimPrefix(err.Error(), "events: ") }

// hasJSONNul tells whether JSON text b has the escape \u0000 (and not an
// escaped backslash followed by "u0000").
func hasJSONNul(b []byte) bool {
	for i := 0; i+6 <= len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if string(b[i+1:i+6]) == "u0000" {
			return true
		}
		i++ // skip the escaped character
	}
	return false
}

// insert writes msgs, all bound for topic, in one statement. A message
// whose event id is already in the outbox fails it with
// events.ErrDuplicateEventID, the transaction still usable.
func insert(ctx context.Context, drv dialect.ExecQuerier, table, topic string, msgs []*message.Message) error {
	exec := &entExecutor{drv: drv}
	pub, err := wsql.NewPublisher(exec, wsql.PublisherConfig{SchemaAdapter: writeAdapter{table: table}}, nil)
	if err != nil {
		return fmt.Errorf("outbox: creating SQL publisher: %w", err)
	}
	for _, msg := range msgs {
		msg.SetContext(ctx)
	}
	if err := pub.Publish(topic, msgs...); err != nil {
		if len(msgs) == 1 {
			return fmt.Errorf("outbox: writing %q event %s: %w", msgs[0].Metadata.Get(events.MetaEventName), msgs[0].UUID, err)
		}
		return fmt.Errorf("outbox: writing %d events to topic %q: %w", len(msgs), topic, err)
	}
	if int(exec.rowsAffected) == len(msgs) {
		return nil
	}
	if len(msgs) == 1 {
		return fmt.Errorf("%w: %s (%q)", events.ErrDuplicateEventID, msgs[0].UUID, msgs[0].Metadata.Get(events.MetaEventName))
	}
	return fmt.Errorf("%w: %d of %d events to topic %q were already in the outbox", events.ErrDuplicateEventID,
		len(msgs)-int(exec.rowsAffected), len(msgs), topic)
}

// NewMessage builds the Watermill message of ev: the event id (cfg's, or a
// new UUIDv7) as UUID, the payload, and the headers plus the outbox
// metadata. It is what Emit writes and what the relay publishes.
func NewMessage(ev Event, cfg events.EmitConfig) (*message.Message, error) {
	id := cfg.EventID
	if id == uuid.Nil {
		var err error
		if id, err = uuid.NewV7(); err != nil {
			return nil, fmt.Errorf("outbox: generating event id: %w", err)
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
