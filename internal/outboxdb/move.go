package outboxdb

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// MoveToDeadLetters moves outbox row id to the dead-letter table with
// reason and at least attempts attempts, in one statement: the row is
// never in both tables, nor in neither. It tells whether the row was
// there to move.
func (t Tables) MoveToDeadLetters(ctx context.Context, e Execer, id int64, reason string, attempts int) (bool, error) {
	res, err := e.ExecContext(ctx, `WITH moved AS (DELETE FROM `+pgsql.QuoteIdent(t.Outbox)+` WHERE id = $1 RETURNING *)
		INSERT INTO `+pgsql.QuoteIdent(t.DeadLetters)+` (event_id, source, event_name, event_version, topic,
			aggregate_type, aggregate_id, aggregate_seq, payload, headers, reason, attempts, created_at)
		SELECT event_id, 'relay', event_name, event_version, topic, aggregate_type, aggregate_id, aggregate_seq,
			convert_to(payload::text, 'UTF8'), headers, $2, GREATEST(attempts, $3), now()
		FROM moved`, id, reason, attempts)
	if err != nil {
		return false, fmt.Errorf("moving row %d to %s: %w", id, t.DeadLetters, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("moving row %d to %s: %w", id, t.DeadLetters, err)
	}
	return n > 0, nil
}

// CarriedRow is an outbox row as a read path carried it, for the dead
// letter of a row the outbox table no longer holds.
type CarriedRow struct {
	ID                         int64 // for errors only: the row is gone
	EventID                    uuid.UUID
	Name                       string
	Version                    int
	Topic                      string
	AggregateType, AggregateID string
	AggregateSeq               int64 // 0 when it had none
	Payload, Headers           []byte
}

// WriteDeadLetter writes the dead letter of row, which the outbox table no
// longer holds (deleted by hand), from what the read path carried: a row
// read is never skipped without a letter. A zero EventID, empty Headers
// and a zero AggregateSeq are written as NULL.
func (t Tables) WriteDeadLetter(ctx context.Context, e Execer, row CarriedRow, reason string, attempts int) error {
	var eventID any
	if row.EventID != uuid.Nil {
		eventID = row.EventID
	}
	var headers any
	if len(row.Headers) > 0 {
		headers = string(row.Headers)
	}
	_, err := e.ExecContext(ctx, `INSERT INTO `+pgsql.QuoteIdent(t.DeadLetters)+` (event_id, source, event_name,
		event_version, topic, aggregate_type, aggregate_id, aggregate_seq, payload, headers, reason, attempts, created_at)
		VALUES ($1, 'relay', $2, $3, $4, $5, $6, $11, $7, $8::jsonb, $9, $10, now())`,
		eventID, row.Name, row.Version, row.Topic, row.AggregateType, row.AggregateID, row.Payload, headers,
		reason, attempts, sql.NullInt64{Int64: row.AggregateSeq, Valid: row.AggregateSeq > 0})
	if err != nil {
		return fmt.Errorf("writing the dead letter of row %d: %w", row.ID, err)
	}
	return nil
}
