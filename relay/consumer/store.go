package consumer

import (
	"context"
	stdsql "database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"entgo.io/ent/dialect"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// ErrDuplicate is returned by a generated handler when the consumer has
// already processed the event: the delivery is acknowledged and skipped.
var ErrDuplicate = errors.New("entoutbox: event already processed by this consumer")

// RecordProcessed inserts (consumer, event id) into the processed-events
// table through the handler's transaction. It returns false, without
// error, when the pair is already there: the event was handled before. A
// concurrent delivery of the same event waits on the unique index until
// the first transaction ends, so only one of them proceeds.
func RecordProcessed(ctx context.Context, tx dialect.ExecQuerier, table string, m events.Meta) (bool, error) {
	var res stdsql.Result
	err := tx.Exec(ctx, `INSERT INTO `+pgsql.QuoteIdent(table)+` (consumer, event_id, event_name, attempts)
		VALUES ($1, $2, $3, $4) ON CONFLICT (consumer, event_id) DO NOTHING`,
		[]any{m.Consumer, m.EventID, m.Name, max(m.Attempt, 1)}, &res)
	if err != nil {
		return false, fmt.Errorf("entoutbox: recording event %s as processed by %q: %w", m.EventID, m.Consumer, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// DeadLetter is an event a consumer gave up on, with why.
type DeadLetter struct {
	Meta     events.Meta // as far as the message told it
	Payload  []byte
	Reason   string
	Attempts int
}

// InsertDeadLetter writes d into the dead-letter table, unless this
// consumer already set the same event aside: a delivery nacked after its
// dead letter was stored (its topic publish failed, the ack was lost) comes
// again and must not be stored twice. Two deliveries giving up at the same
// instant can still both write one.
func InsertDeadLetter(ctx context.Context, db dialect.ExecQuerier, table string, d DeadLetter) error {
	var eventID any
	if d.Meta.EventID != uuid.Nil {
		eventID = d.Meta.EventID
	}
	var headers any
	if len(d.Meta.Headers) > 0 {
		b, err := json.Marshal(d.Meta.Headers)
		if err != nil {
			return err
		}
		headers = string(b)
	}
	var res stdsql.Result
	t := pgsql.QuoteIdent(table)
	err := db.Exec(ctx, `INSERT INTO `+t+` (event_id, source, event_name, event_version, topic,
		aggregate_type, aggregate_id, payload, headers, reason, attempts)
		SELECT $1::uuid, $2::text, $3::text, $4::bigint, $5::text, $6::text, $7::text, $8::bytea, $9::jsonb, $10::text, $11::bigint
		WHERE $1::uuid IS NULL OR NOT EXISTS (SELECT 1 FROM `+t+` WHERE event_id = $1::uuid AND source = $2::text)`,
		[]any{eventID, d.Meta.Consumer, d.Meta.Name, d.Meta.Version, d.Meta.Topic, d.Meta.AggregateType,
			d.Meta.AggregateID, d.Payload, headers, d.Reason, d.Attempts}, &res)
	if err != nil {
		return fmt.Errorf("entoutbox: writing dead letter for event %s: %w", d.Meta.EventID, err)
	}
	return nil
}
