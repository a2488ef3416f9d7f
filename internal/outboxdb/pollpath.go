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
	// PollDelivered records the rows ?1 (a JSON array of ids) delivered.
	PollDelivered = defineOnly("poll/delivered", SQLite, func(t Tables) string {
		return `UPDATE ` + pgsql.QuoteIdent(t.Outbox) + ` SET delivered_at = ` + sqliteNow +
			` WHERE id IN (SELECT value FROM json_each(?1))`
	})
	// PollDeliveredDelete deletes the rows ?1 (a JSON array of ids),
	// delivered (Delete mode).
	PollDeliveredDelete = defineOnly("poll/delivered-delete", SQLite, func(t Tables) string {
		return `DELETE FROM ` + pgsql.QuoteIdent(t.Outbox) + ` WHERE id IN (SELECT value FROM json_each(?1))`
	})
	// PollFailed records a failed publish of row ?1: ?2 attempts so far,
	// tried again ?3 milliseconds from now, for reason ?4.
	PollFailed = defineOnly("poll/failed", SQLite, func(t Tables) string {
		return `UPDATE ` + pgsql.QuoteIdent(t.Outbox) + ` SET attempts = ?2,
		available_at = strftime('%Y-%m-%d %H:%M:%f', 'now', printf('+%.3f seconds', ?3 / 1000.0)), last_error = ?4 WHERE id = ?1`
	})
)

// PollLease is the table of the poll path's lease: one row, the relay
// that relays the outbox now and until when. SQLite has no row locks to
// share rows between relays, so one relays at a time and the others wait.
func (t Tables) PollLease() string { return t.Outbox + pollLeaseSuffix }

const pollLeaseSuffix = "_relay_lease"

var (
	// PollLeaseCreate creates the lease's table.
	PollLeaseCreate = defineOnly("poll/lease-create", SQLite, func(t Tables) string {
		return `CREATE TABLE IF NOT EXISTS ` + pgsql.QuoteIdent(t.PollLease()) + ` (
		id INTEGER PRIMARY KEY CHECK (id = 1), holder TEXT NOT NULL, until TEXT NOT NULL)`
	})
	// PollLeaseTake takes or renews the lease for relay ?1 for ?2
	// milliseconds: one row changed when it holds it, none when another
	// relay's lease runs.
	PollLeaseTake = defineOnly("poll/lease-take", SQLite, func(t Tables) string {
		l := pgsql.QuoteIdent(t.PollLease())
		return `INSERT INTO ` + l + ` (id, holder, until)
		VALUES (1, ?1, strftime('%Y-%m-%d %H:%M:%f', 'now', printf('+%.3f seconds', ?2 / 1000.0)))
		ON CONFLICT (id) DO UPDATE SET holder = excluded.holder, until = excluded.until
		WHERE ` + l + `.holder = excluded.holder OR julianday(` + l + `.until) < julianday('now')`
	})
	// PollLeaseRelease gives the lease of relay ?1 up.
	PollLeaseRelease = defineOnly("poll/lease-release", SQLite, func(t Tables) string {
		return `DELETE FROM ` + pgsql.QuoteIdent(t.PollLease()) + ` WHERE holder = ?1`
	})
)
