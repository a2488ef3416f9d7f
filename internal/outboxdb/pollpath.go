package outboxdb

import "github.com/entoutbox/entoutbox/internal/pgsql"

// The poll path's statements: the relay's read path on SQLite, where one
// relay runs at a time and reads the undelivered rows in id order.
var (
	// PollPending reads up to ?2 undelivered rows after id ?1, in id
	// order: id, event_id, event_name, event_version, topic,
	// aggregate_type, aggregate_id, payload, headers, readable_from (0 for
	// none), aggregate_seq (0 for none), created_at, attempts, and the
	// milliseconds until the row may be tried again (0 when due).
	PollPending = defineOnly("poll/pending", SQLite, func(t Tables) string {
		return `SELECT id, event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers,
		COALESCE(readable_from, 0), COALESCE(aggregate_seq, 0), created_at, attempts,
		MAX(0, CAST(ROUND((julianday(available_at) - julianday('now')) * 86400000.0) AS INTEGER))
		FROM ` + pgsql.QuoteIdent(t.Outbox) + ` WHERE delivered_at IS NULL AND id > ?1 ORDER BY id LIMIT ?2`
	})
	// PollDelivered records row ?1 delivered.
	PollDelivered = defineOnly("poll/delivered", SQLite, func(t Tables) string {
		return `UPDATE ` + pgsql.QuoteIdent(t.Outbox) + ` SET delivered_at = ` + sqliteNow + ` WHERE id = ?1`
	})
	// PollDeliveredDelete deletes row ?1, delivered (Delete mode).
	PollDeliveredDelete = defineOnly("poll/delivered-delete", SQLite, func(t Tables) string {
		return `DELETE FROM ` + pgsql.QuoteIdent(t.Outbox) + ` WHERE id = ?1`
	})
	// PollFailed records a failed publish of row ?1: ?2 attempts so far,
	// tried again ?3 milliseconds from now, for reason ?4.
	PollFailed = defineOnly("poll/failed", SQLite, func(t Tables) string {
		return `UPDATE ` + pgsql.QuoteIdent(t.Outbox) + ` SET attempts = ?2,
		available_at = strftime('%Y-%m-%d %H:%M:%f', 'now', printf('+%.3f seconds', ?3 / 1000.0)), last_error = ?4 WHERE id = ?1`
	})
)
