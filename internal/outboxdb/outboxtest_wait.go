package outboxdb

import "github.com/entoutbox/entoutbox/internal/pgsql"

// The reads of package outboxtest's Wait: where a test's events stand.

// OutboxtestScheduledDue reads the scheduled events due by $1 and not
// cancelled (event_id, event_name, event_version, topic, aggregate_id,
// deliver_at), in the order they were written.
var OutboxtestScheduledDue = define("outboxtest/scheduled-due", func(t Tables) string {
	return `SELECT event_id, event_name, event_version, topic, aggregate_id, deliver_at
			FROM ` + pgsql.QuoteIdent(t.Scheduled) + ` WHERE cancelled_at IS NULL AND deliver_at <= $1 ORDER BY id`
})

// OutboxtestRows reads the outbox rows due by $1, tried already or
// delivered (event_id, event_name, event_version, topic, aggregate_id,
// delivered, attempts, last_error or "", available_at), in id order.
var OutboxtestRows = define("outboxtest/rows", func(t Tables) string {
	return `SELECT event_id, event_name, event_version, topic, aggregate_id,
			delivered_at IS NOT NULL, attempts, COALESCE(last_error, ''), available_at
		FROM ` + pgsql.QuoteIdent(t.Outbox) + ` WHERE delivered_at IS NOT NULL OR attempts > 0 OR available_at <= $1 ORDER BY id`
})

// OutboxtestRelayLetters reads the relay's dead letters (event id, also
// once retried, event_name, event_version, topic, aggregate_id, attempts,
// reason), in id order.
var OutboxtestRelayLetters = define("outboxtest/relay-letters", func(t Tables) string {
	return `SELECT COALESCE(event_id, retried_event_id), COALESCE(event_name, ''),
			COALESCE(event_version, 0), COALESCE(topic, ''), COALESCE(aggregate_id, ''), attempts, reason
		FROM ` + pgsql.QuoteIdent(t.DeadLetters) + ` WHERE source = 'relay' ORDER BY id`
})

// OutboxtestOutcomes reads what each consumer did with each event
// (consumer, event_id, attempts, handled, the dead letter's reason): its
// dedupe record, or its dead letter.
var OutboxtestOutcomes = define("outboxtest/outcomes", func(t Tables) string {
	return `SELECT consumer, event_id, attempts, true, '' FROM ` + pgsql.QuoteIdent(t.Processed) + `
		UNION ALL SELECT source, event_id, attempts, false, reason FROM ` + pgsql.QuoteIdent(t.DeadLetters) + `
			WHERE source <> 'relay' AND event_id IS NOT NULL`
})
