package outboxdb

import "github.com/entoutbox/entoutbox/internal/pgsql"

// The reads of package outboxtest's Wait: where a test's events stand.
// SQLite's forms compare times through julianday: the rows hold them in
// the forms ent and the outbox's statements write, which sort apart as
// text.

// OutboxtestScheduledDue reads the scheduled events due by $1 and not
// cancelled (event_id, event_name, event_version, topic, aggregate_id,
// deliver_at), in the order they were written.
var OutboxtestScheduledDue = define("outboxtest/scheduled-due", func(t Tables) string {
	return `SELECT event_id, event_name, event_version, topic, aggregate_id, deliver_at
			FROM ` + pgsql.QuoteIdent(t.Scheduled) + ` WHERE cancelled_at IS NULL AND deliver_at <= $1 ORDER BY id`
}).also(SQLite, func(t Tables) string {
	return `SELECT event_id, event_name, event_version, topic, aggregate_id, deliver_at
			FROM ` + SQLite.quote(t.Scheduled) + ` WHERE cancelled_at IS NULL AND julianday(deliver_at) <= julianday(?1) ORDER BY id`
}).also(MySQL, func(t Tables) string {
	return `SELECT event_id, event_name, event_version, topic, aggregate_id, deliver_at
			FROM ` + MySQL.quote(t.Scheduled) + ` WHERE cancelled_at IS NULL AND deliver_at <= ?1 ORDER BY id`
})

// OutboxtestRows reads the outbox rows due by $1, tried already or
// delivered (event_id, event_name, event_version, topic, aggregate_id,
// delivered, attempts, last_error or "", available_at), in id order.
var OutboxtestRows = define("outboxtest/rows", func(t Tables) string {
	return `SELECT event_id, event_name, event_version, topic, aggregate_id,
			delivered_at IS NOT NULL, attempts, COALESCE(last_error, ''), available_at
		FROM ` + pgsql.QuoteIdent(t.Outbox) + ` WHERE delivered_at IS NOT NULL OR attempts > 0 OR available_at <= $1 ORDER BY id`
}).also(SQLite, func(t Tables) string {
	return `SELECT event_id, event_name, event_version, topic, aggregate_id,
			delivered_at IS NOT NULL, attempts, COALESCE(last_error, ''), available_at
		FROM ` + SQLite.quote(t.Outbox) + ` WHERE delivered_at IS NOT NULL OR attempts > 0
			OR julianday(available_at) <= julianday(?1) ORDER BY id`
}).also(MySQL, func(t Tables) string {
	return `SELECT event_id, event_name, event_version, topic, aggregate_id,
			delivered_at IS NOT NULL, attempts, COALESCE(last_error, ''), available_at
		FROM ` + MySQL.quote(t.Outbox) + ` WHERE delivered_at IS NOT NULL OR attempts > 0 OR available_at <= ?1 ORDER BY id`
})

// OutboxtestRelayLetters reads the relay's dead letters (event id, also
// once retried, event_name, event_version, topic, aggregate_id, attempts,
// reason), in id order.
var OutboxtestRelayLetters = define("outboxtest/relay-letters", func(t Tables) string {
	return outboxtestRelayLetters(pgsql.QuoteIdent(t.DeadLetters))
}).also(SQLite, func(t Tables) string {
	return outboxtestRelayLetters(SQLite.quote(t.DeadLetters))
}).also(MySQL, func(t Tables) string {
	return outboxtestRelayLetters(MySQL.quote(t.DeadLetters))
})

func outboxtestRelayLetters(deadLetters string) string {
	return `SELECT COALESCE(event_id, retried_event_id), COALESCE(event_name, ''),
			COALESCE(event_version, 0), COALESCE(topic, ''), COALESCE(aggregate_id, ''), attempts, reason
		FROM ` + deadLetters + ` WHERE source = 'relay' ORDER BY id`
}

// OutboxtestOutcomes reads what each consumer did with each event
// (consumer, event_id, attempts, handled, the dead letter's reason): its
// dedupe record, or its dead letter.
var OutboxtestOutcomes = define("outboxtest/outcomes", func(t Tables) string {
	return outboxtestOutcomes(pgsql.QuoteIdent(t.Processed), pgsql.QuoteIdent(t.DeadLetters))
}).also(SQLite, func(t Tables) string {
	return outboxtestOutcomes(SQLite.quote(t.Processed), SQLite.quote(t.DeadLetters))
}).also(MySQL, func(t Tables) string {
	return outboxtestOutcomes(MySQL.quote(t.Processed), MySQL.quote(t.DeadLetters))
})

func outboxtestOutcomes(processed, deadLetters string) string {
	return `SELECT consumer, event_id, attempts, true, '' FROM ` + processed + `
		UNION ALL SELECT source, event_id, attempts, false, reason FROM ` + deadLetters + `
			WHERE source <> 'relay' AND event_id IS NOT NULL`
}
