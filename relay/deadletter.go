package relay

import (
	"context"
	"fmt"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
)

// moveToDeadLetters moves outbox row id to the dead-letter table with the
// reason, in one statement: the row is never in both tables, nor in
// neither.
func moveToDeadLetters(ctx context.Context, exec wsql.ContextExecutor, table, deadLetterTable string, id int64, reason string) error {
	q := `WITH moved AS (DELETE FROM ` + quoteIdent(table) + ` WHERE id = $1 RETURNING *)
		INSERT INTO ` + quoteIdent(deadLetterTable) + ` (event_id, source, event_name, event_version, topic,
			aggregate_type, aggregate_id, payload, headers, reason, attempts, created_at)
		SELECT event_id, 'relay', event_name, event_version, topic, aggregate_type, aggregate_id,
			convert_to(payload::text, 'UTF8'), headers, $2, attempts, now()
		FROM moved`
	if _, err := exec.ExecContext(ctx, q, id, reason); err != nil {
		return fmt.Errorf("relay: moving row %d to %s: %w", id, deadLetterTable, err)
	}
	return nil
}
