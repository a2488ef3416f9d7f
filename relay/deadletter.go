package relay

import "github.com/entoutbox/entoutbox/internal/pgsql"

// deadLetterQuery moves outbox row $1 to the dead-letter table with reason
// $2 and at least $3 attempts, in one statement: the row is never in both
// tables, nor in neither.
func deadLetterQuery(table, deadLetterTable string) string {
	return `WITH moved AS (DELETE FROM ` + pgsql.QuoteIdent(table) + ` WHERE id = $1 RETURNING *)
		INSERT INTO ` + pgsql.QuoteIdent(deadLetterTable) + ` (event_id, source, event_name, event_version, topic,
			aggregate_type, aggregate_id, payload, headers, reason, attempts, created_at)
		SELECT event_id, 'relay', event_name, event_version, topic, aggregate_type, aggregate_id,
			convert_to(payload::text, 'UTF8'), headers, $2, GREATEST(attempts, $3), now()
		FROM moved`
}
