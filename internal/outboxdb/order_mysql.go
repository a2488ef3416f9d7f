package outboxdb

import "github.com/entoutbox/entoutbox/internal/pgsql"

// The consumers' statements on MySQL (MySQL 8, MariaDB 10.6+). As on
// SQLite, a statement that does several things on PostgreSQL (a WITH that
// writes, RETURNING) is several here, run in order by the consumer
// (ordering), and waiting deliveries look at their position at each pause
// rather than being woken (no LISTEN). Unlike SQLite, writers run at
// once: the position row's lock orders an aggregate's deliveries (taken
// by the upsert that makes the row, held to the end of the handler's
// transaction), and the dedupe record's unique key its redeliveries.

// mysqlSeconds is the seconds from the time column col to now.
func mysqlSeconds(col string) string {
	return `TIMESTAMPDIFF(MICROSECOND, ` + col + `, ` + mysqlNow + `) / 1000000`
}

// mysqlAgo is the time secs (an SQL expression, seconds) before now.
func mysqlAgo(secs string) string {
	return mysqlNow + ` - INTERVAL CAST(` + secs + ` * 1000000 AS SIGNED) MICROSECOND`
}

// mysqlKeep is the no-op update that makes an INSERT skip a duplicate
// without an error (and without IGNORE, which would hide other errors): it
// counts no row affected.
const mysqlKeep = ` ON DUPLICATE KEY UPDATE consumer = consumer`

func init() {
	q := MySQL.quote
	orderLockPositionCreate.also(MySQL, func(t Tables) string {
		// The duplicate's row is locked exclusively, as a new row is.
		return `INSERT INTO ` + q(t.Positions) + ` (consumer, topic, aggregate_type, aggregate_id, last_seq, updated_at)
		VALUES (?1, ?2, ?3, ?4, 0, ` + mysqlNow + `)` + mysqlKeep
	})
	orderRecordProcessed.also(MySQL, func(t Tables) string {
		return `INSERT INTO ` + q(t.Processed) + ` (consumer, event_id, event_name, attempts)
		VALUES (?1, ?2, ?3, ?4)` + mysqlKeep
	})
	orderRecordDelivery.also(MySQL, func(t Tables) string {
		return `INSERT INTO ` + q(t.Processed) + ` (consumer, event_id, event_name, attempts)
		SELECT ?1, ?2, ?3, ?4 FROM DUAL
		WHERE NOT EXISTS (SELECT 1 FROM ` + q(t.DeadLetters) + ` WHERE event_id = ?2 AND source = ?1)` + mysqlKeep
	})
	orderRecordRetried.also(MySQL, func(t Tables) string {
		return `INSERT INTO ` + q(t.Processed) + ` (consumer, event_id, event_name, attempts)
		SELECT ?1, ?2, ?3, ?4 FROM DUAL
		WHERE EXISTS (SELECT 1 FROM ` + q(t.DeadLetters) + ` WHERE retried_event_id = ?2 AND source = ?1)` + mysqlKeep
	})
	// The read after LockPositionCreateQuery, a locking one: under
	// REPEATABLE READ a plain read could see the row as it was when the
	// transaction's snapshot was taken. ?5 the event, ?6 its seq.
	orderLockPosition.also(MySQL, func(t Tables) string {
		return serialLockPosition(t, q, mysqlSeconds("p.waiting_since")) + ` FOR UPDATE`
	})
	orderMove.also(MySQL, func(t Tables) string {
		return `UPDATE ` + q(t.Positions) + ` SET ` + serialMove("?2", mysqlNow) + ` WHERE id = ?1`
	})
	orderHold.also(MySQL, func(t Tables) string {
		return `UPDATE ` + q(t.Positions) + ` SET held_seq = ?2, held_event_id = ?3, held_at = ` + mysqlNow +
			`, updated_at = ` + mysqlNow + ` WHERE id = ?1`
	})
	// The note alone: MySQL has no RETURNING, and the consumer reads the
	// position after it (PositionQuery), in the same transaction.
	orderNoteWaiting.also(MySQL, func(t Tables) string {
		gap := `?5 > last_seq + 1 AND held_seq IS NULL`
		return `INSERT INTO ` + q(t.Positions) + `
		(consumer, topic, aggregate_type, aggregate_id, last_seq, waiting_since, waiting_seq, updated_at)
		VALUES (?1, ?2, ?3, ?4, 0, CASE WHEN ?5 > 1 THEN ` + mysqlNow + ` END, CASE WHEN ?5 > 1 THEN ?5 END, ` + mysqlNow + `)
		ON DUPLICATE KEY UPDATE
			waiting_since = CASE WHEN ` + gap + ` THEN COALESCE(waiting_since, ` + mysqlNow + `) ELSE waiting_since END,
			waiting_seq = CASE WHEN ` + gap + ` THEN COALESCE(LEAST(waiting_seq, ?5), ?5) ELSE waiting_seq END`
	})
	// No RETURNING: the seq it started at comes back as the statement's
	// LAST_INSERT_ID(expr).
	orderStartAggregate.also(MySQL, func(t Tables) string {
		return `UPDATE ` + q(t.Positions) + ` SET last_seq = LAST_INSERT_ID(waiting_seq) - 1, updated_at = ` + mysqlNow + `
			WHERE consumer = ?1 AND topic = ?2 AND aggregate_type = ?3 AND aggregate_id = ?4
				AND last_seq = 0 AND held_seq IS NULL AND waiting_seq > 1 AND waiting_since <= ` + mysqlAgo("?5")
	})
	orderPosition.also(MySQL, func(t Tables) string {
		return `SELECT last_seq, held_seq IS NOT NULL, ` + mysqlSeconds("waiting_since") + `, waiting_seq
		FROM ` + q(t.Positions) + ` WHERE consumer = ?1 AND topic = ?2 AND aggregate_type = ?3 AND aggregate_id = ?4`
	})
	orderRetriedBack.also(MySQL, func(t Tables) string {
		letters := q(t.DeadLetters)
		return `SELECT EXISTS (SELECT 1 FROM ` + letters + ` WHERE source = ?1 AND retried_event_id = ?2
				AND retried_at > ` + mysqlAgo("?3") + `)
			AND NOT EXISTS (SELECT 1 FROM ` + letters + ` WHERE source = ?1 AND event_id = ?2)`
	})
	orderHeldAt.also(MySQL, func(t Tables) string {
		return `SELECT EXISTS (SELECT 1 FROM ` + q(t.Positions) + `
				WHERE consumer = ?1 AND topic = ?2 AND aggregate_type = ?3 AND aggregate_id = ?4 AND held_seq = ?5)`
	})
	settleTarget.also(MySQL, func(t Tables) string { return settleTargetOf(t, q) })
	// Each item reads only columns set after it (MySQL reads the new
	// values of those set before): the times first.
	settleUpdate.also(MySQL, func(t Tables) string {
		return `UPDATE ` + q(t.Positions) + ` SET
			held_at = CASE WHEN ?3 IS NULL THEN NULL WHEN ?3 <=> held_seq THEN held_at ELSE ` + mysqlNow + ` END,
			waiting_since = CASE WHEN ?2 = last_seq THEN waiting_since WHEN waiting_seq > ?2 THEN ` + mysqlNow + ` END,
			waiting_seq = CASE WHEN waiting_seq > ?2 THEN waiting_seq END,
			last_seq = ?2, held_seq = ?3, held_event_id = ?4, updated_at = ` + mysqlNow + `
		WHERE id = ?1`
	})
}

// MoveNextQuery moves the position of consumer ?1 on topic ?2, aggregate
// ?3/?4, to seq ?5 when that is its next and it is not held: on MySQL and
// SQLite the first statement of the common case (on MySQL a lock on the
// row alone, by its whole key); no row affected when it is not the case.
func (t Tables) MoveNextQuery() string { return t.cached(orderMoveNext) }

var orderMoveNext = defineOnly("order/move-next", MySQL, func(t Tables) string { return moveNext(t, MySQL.quote, mysqlNow) }).
	also(SQLite, func(t Tables) string { return moveNext(t, pgsql.QuoteIdent, sqliteNow) })

func moveNext(t Tables, quote func(string) string, now string) string {
	return `UPDATE ` + quote(t.Positions) + ` SET ` + serialMove("?5", now) + `
		WHERE consumer = ?1 AND topic = ?2 AND aggregate_type = ?3 AND aggregate_id = ?4
			AND last_seq = ?5 - 1 AND held_seq IS NULL`
}
