package outboxdb

import "github.com/entoutbox/entoutbox/internal/pgsql"

// SettleQuery's work on SQLite, whose UPDATE cannot be fed by a WITH that
// writes: SettleTargetQuery reads where the position of consumer $1 on
// topic $2, aggregate $3/$4, is to be (the same rule: past the letters
// discarded, held at this consumer's next open letter), and
// SettleUpdateQuery writes it when it changed.

// SettleTargetQuery returns the position's id, last_seq, the seq to move
// to, the held seq and event after the move, and the held seq and event
// before it; no row when there is no position.
func (t Tables) SettleTargetQuery() string { return t.cached(settleTarget) }

// SettleUpdateQuery moves position $1 to seq $2, held at $3, event $4
// (NULLs: released).
func (t Tables) SettleUpdateQuery() string { return t.cached(settleUpdate) }

var (
	settleTarget = defineOnly("settle/target", SQLite, func(t Tables) string { return settleTargetOf(t, pgsql.QuoteIdent) })
	settleUpdate = defineOnly("settle/update", SQLite, func(t Tables) string {
		return `UPDATE ` + pgsql.QuoteIdent(t.Positions) + ` SET last_seq = ?2, held_seq = ?3, held_event_id = ?4,
			held_at = CASE WHEN ?3 IS NULL THEN NULL WHEN ?3 IS held_seq THEN held_at ELSE ` + sqliteNow + ` END,
			waiting_since = CASE WHEN ?2 = last_seq THEN waiting_since WHEN waiting_seq > ?2 THEN ` + sqliteNow + ` END,
			waiting_seq = CASE WHEN waiting_seq > ?2 THEN waiting_seq END,
			updated_at = ` + sqliteNow + `
		WHERE id = ?1`
	})
)

// settleTargetOf is SettleTargetQuery with names quoted by quote (the
// statement is SQLite's and MySQL's alike).
func settleTargetOf(t Tables, quote func(string) string) string {
	return `WITH RECURSIVE pos AS (
		SELECT id, last_seq, held_seq, held_event_id FROM ` + quote(t.Positions) + `
		WHERE consumer = ?1 AND topic = ?2 AND aggregate_type = ?3 AND aggregate_id = ?4),
	letters AS (
		SELECT aggregate_seq AS seq, event_id, discarded_at IS NOT NULL AS discarded, source = ?1 AS own
		FROM ` + quote(t.DeadLetters) + `
		WHERE source IN (?1, 'relay') AND topic = ?2 AND aggregate_type = ?3 AND aggregate_id = ?4
			AND aggregate_seq IS NOT NULL AND retried_at IS NULL),
	skipped (seq) AS (
		SELECT last_seq FROM pos
		UNION ALL
		SELECT s.seq + 1 FROM skipped s WHERE EXISTS (SELECT 1 FROM letters l WHERE l.seq = s.seq + 1 AND l.discarded)
			AND NOT EXISTS (SELECT 1 FROM letters l WHERE l.seq = s.seq + 1 AND l.own AND NOT l.discarded AND l.event_id IS NOT NULL)),
	moved AS (SELECT pos.*, (SELECT max(seq) FROM skipped) AS to_seq FROM pos),
	next AS (
		SELECT moved.id, l.seq, l.event_id FROM moved JOIN letters l
			ON l.seq = moved.to_seq + 1 AND l.own AND NOT l.discarded AND l.event_id IS NOT NULL
		ORDER BY l.event_id LIMIT 1)
	SELECT moved.id, moved.last_seq, moved.to_seq,
		CASE WHEN moved.to_seq = moved.last_seq AND moved.held_seq IS NOT NULL THEN moved.held_seq ELSE next.seq END,
		CASE WHEN moved.to_seq = moved.last_seq AND moved.held_seq IS NOT NULL THEN moved.held_event_id ELSE next.event_id END,
		moved.held_seq, moved.held_event_id
	FROM moved LEFT JOIN next ON next.id = moved.id`
}
