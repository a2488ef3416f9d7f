package outboxdb

// The consumers' statements on SQLite. SQLite writes one transaction at a
// time (the handler's, begun with the write lock), so nothing is locked
// row by row; it has no data-modifying WITH and no NOTIFY, so a statement
// that does several things on PostgreSQL is several here, run in order by
// the consumer (ordering), and waiting deliveries look at their position
// at each pause rather than being woken.

import "github.com/entoutbox/entoutbox/internal/pgsql"

// sqliteSeconds is the seconds from the time column col to now.
func sqliteSeconds(col string) string { return `(julianday('now') - julianday(` + col + `)) * 86400.0` }

// serialMove is the SET items that move a position to seq to (an SQL
// expression), releasing the aggregate when it was held there, now being
// the database's clock: as moveReleasing, without the notification. Each
// item reads only columns set after it, as MySQL reads the new values of
// those set before.
func serialMove(to, now string) string {
	return `last_seq = ` + to + `,
			waiting_since = CASE WHEN waiting_seq > ` + to + ` THEN ` + now + ` END,
			waiting_seq = CASE WHEN waiting_seq > ` + to + ` THEN waiting_seq END,
			held_event_id = CASE WHEN held_seq = ` + to + ` THEN NULL ELSE held_event_id END,
			held_at = CASE WHEN held_seq = ` + to + ` THEN NULL ELSE held_at END,
			held_seq = CASE WHEN held_seq = ` + to + ` THEN NULL ELSE held_seq END,
			updated_at = ` + now
}

// LockPositionCreateQuery makes the position of consumer $1 on topic $2,
// aggregate $3/$4, at 0 when there is none: on SQLite, LockPositionQuery
// then reads it.
func (t Tables) LockPositionCreateQuery() string { return t.cached(orderLockPositionCreate) }

var orderLockPositionCreate = defineOnly("order/lock-position-create", SQLite, func(t Tables) string {
	return `INSERT INTO ` + pgsql.QuoteIdent(t.Positions) + ` (consumer, topic, aggregate_type, aggregate_id, last_seq, updated_at)
		VALUES (?1, ?2, ?3, ?4, 0, ` + sqliteNow + `) ON CONFLICT (consumer, topic, aggregate_type, aggregate_id) DO NOTHING`
})

func init() {
	orderRecordProcessed.also(SQLite, func(t Tables) string {
		return `INSERT INTO ` + pgsql.QuoteIdent(t.Processed) + ` (consumer, event_id, event_name, attempts)
		VALUES (?1, ?2, ?3, ?4) ON CONFLICT (consumer, event_id) DO NOTHING`
	})
	orderRecordDelivery.also(SQLite, func(t Tables) string {
		return `INSERT INTO ` + pgsql.QuoteIdent(t.Processed) + ` (consumer, event_id, event_name, attempts)
		SELECT ?1, ?2, ?3, ?4
		WHERE NOT EXISTS (SELECT 1 FROM ` + pgsql.QuoteIdent(t.DeadLetters) + ` WHERE event_id = ?2 AND source = ?1)
		ON CONFLICT (consumer, event_id) DO NOTHING`
	})
	orderRecordRetried.also(SQLite, func(t Tables) string {
		return `INSERT INTO ` + pgsql.QuoteIdent(t.Processed) + ` (consumer, event_id, event_name, attempts)
		SELECT ?1, ?2, ?3, ?4
		WHERE EXISTS (SELECT 1 FROM ` + pgsql.QuoteIdent(t.DeadLetters) + ` WHERE retried_event_id = ?2 AND source = ?1)
		ON CONFLICT (consumer, event_id) DO NOTHING`
	})
	// The read after LockPositionCreateQuery: ?5 the event, ?6 its seq.
	orderLockPosition.also(SQLite, func(t Tables) string {
		return serialLockPosition(t, pgsql.QuoteIdent, sqliteSeconds("p.waiting_since"))
	})
	orderMove.also(SQLite, func(t Tables) string {
		return `UPDATE ` + pgsql.QuoteIdent(t.Positions) + ` SET ` + serialMove("?2", sqliteNow) + ` WHERE id = ?1`
	})
	orderHold.also(SQLite, func(t Tables) string {
		return `UPDATE ` + pgsql.QuoteIdent(t.Positions) + ` SET held_seq = ?2, held_event_id = ?3, held_at = ` + sqliteNow +
			`, updated_at = ` + sqliteNow + ` WHERE id = ?1`
	})
	orderNoteWaiting.also(SQLite, func(t Tables) string {
		p := pgsql.QuoteIdent(t.Positions)
		gap := `?5 > ` + p + `.last_seq + 1 AND ` + p + `.held_seq IS NULL`
		return `INSERT INTO ` + p + `
		(consumer, topic, aggregate_type, aggregate_id, last_seq, waiting_since, waiting_seq, updated_at)
		VALUES (?1, ?2, ?3, ?4, 0, CASE WHEN ?5 > 1 THEN ` + sqliteNow + ` END, CASE WHEN ?5 > 1 THEN ?5 END, ` + sqliteNow + `)
		ON CONFLICT (consumer, topic, aggregate_type, aggregate_id) DO UPDATE
		SET waiting_since = CASE WHEN ` + gap + ` THEN COALESCE(` + p + `.waiting_since, ` + sqliteNow + `) ELSE ` + p + `.waiting_since END,
			waiting_seq = CASE WHEN ` + gap + ` THEN COALESCE(MIN(` + p + `.waiting_seq, ?5), ?5) ELSE ` + p + `.waiting_seq END
		RETURNING last_seq, held_seq IS NOT NULL, ` + sqliteSeconds("waiting_since") + `, waiting_seq`
	})
	orderStartAggregate.also(SQLite, func(t Tables) string {
		return `UPDATE ` + pgsql.QuoteIdent(t.Positions) + ` SET last_seq = waiting_seq - 1, updated_at = ` + sqliteNow + `
			WHERE consumer = ?1 AND topic = ?2 AND aggregate_type = ?3 AND aggregate_id = ?4
				AND last_seq = 0 AND held_seq IS NULL AND waiting_seq > 1
				AND julianday(waiting_since) <= julianday('now') - ?5 / 86400.0
			RETURNING waiting_seq`
	})
	orderPosition.also(SQLite, func(t Tables) string {
		return `SELECT last_seq, held_seq IS NOT NULL, ` + sqliteSeconds("waiting_since") + `, waiting_seq
		FROM ` + pgsql.QuoteIdent(t.Positions) + ` WHERE consumer = ?1 AND topic = ?2 AND aggregate_type = ?3 AND aggregate_id = ?4`
	})
	orderRetriedBack.also(SQLite, func(t Tables) string {
		letters := pgsql.QuoteIdent(t.DeadLetters)
		return `SELECT EXISTS (SELECT 1 FROM ` + letters + ` WHERE source = ?1 AND retried_event_id = ?2
				AND julianday(retried_at) > julianday('now') - ?3 / 86400.0)
			AND NOT EXISTS (SELECT 1 FROM ` + letters + ` WHERE source = ?1 AND event_id = ?2)`
	})
	orderHeldAt.also(SQLite, func(t Tables) string {
		return `SELECT EXISTS (SELECT 1 FROM ` + pgsql.QuoteIdent(t.Positions) + `
				WHERE consumer = ?1 AND topic = ?2 AND aggregate_type = ?3 AND aggregate_id = ?4 AND held_seq = ?5)`
	})
}

// serialLockPosition is the read after LockPositionCreateQuery on SQLite
// and MySQL, names quoted by quote, waited the seconds since
// p.waiting_since: ?5 the event, ?6 its seq.
func serialLockPosition(t Tables, quote func(string) string, waited string) string {
	letters := quote(t.DeadLetters)
	return `SELECT p.id, p.last_seq, p.held_seq, p.held_event_id, ` + waited + `,
			EXISTS (SELECT 1 FROM ` + letters + ` WHERE event_id = ?5 AND source = ?1),
			CASE WHEN p.held_seq IS NOT NULL OR ?6 > p.last_seq + 1 THEN EXISTS (SELECT 1 FROM ` + letters + `
				WHERE source IN (?1, 'relay') AND topic = ?2 AND aggregate_type = ?3 AND aggregate_id = ?4
					AND aggregate_seq = p.last_seq + 1 AND discarded_at IS NOT NULL AND retried_at IS NULL)
				AND NOT EXISTS (SELECT 1 FROM ` + letters + ` WHERE source = ?1 AND topic = ?2
					AND aggregate_type = ?3 AND aggregate_id = ?4 AND aggregate_seq = p.last_seq + 1
					AND event_id IS NOT NULL AND discarded_at IS NULL AND retried_at IS NULL) ELSE 0 END
		FROM ` + quote(t.Positions) + ` p
		WHERE p.consumer = ?1 AND p.topic = ?2 AND p.aggregate_type = ?3 AND p.aggregate_id = ?4`
}
