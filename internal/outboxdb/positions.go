package outboxdb

// The consumers' positions: the statement that applies runs of
// aggregates' events, and the SET items every statement moving a
// position shares (the waiting mark and the wake-up notification).

import "github.com/entoutbox/entoutbox/internal/pgsql"

// PositionsChannel is the channel on which the moves of t's positions
// wake the consumer deliveries waiting on them.
func (t Tables) PositionsChannel() string { return t.Positions }

// WaitingAfterMove is the SET items of a statement that moves position
// row (its columns as they were) to seq to (SQL expressions): the mark
// stays while the marked event is after to, its wait starting anew, and
// the waiting consumers are told at commit when there was one.
func (t Tables) WaitingAfterMove(row, to string) string {
	mark := `CASE WHEN ` + row + `.waiting_seq > ` + to + ` THEN ` + row + `.waiting_seq END`
	return `waiting_since = CASE WHEN ` + row + `.waiting_seq > ` + to + ` THEN now() END,
		waiting_seq = CASE WHEN ` + row + `.waiting_seq IS NOT NULL THEN
			(SELECT ` + mark + ` FROM ` + t.NotifyWaiters(row, to, mark) + `) END`
}

// NotifyWaiters calls pg_notify for the aggregate of position row, moved
// to seq to and marked at mark after the move (SQL expressions; the mark
// NULL for none). The payload names the writer's schema: the channel is
// named after the table alone, which other schemas may hold too.
func (t Tables) NotifyWaiters(row, to, mark string) string {
	return `pg_notify(` + pgsql.QuoteLiteral(t.PositionsChannel()) + `, json_build_object('schema', current_schema(), 'consumer', ` + row + `.consumer, 'topic', ` +
		row + `.topic, 'aggregate_type', ` + row + `.aggregate_type, 'aggregate_id', ` + row + `.aggregate_id, 'last_seq', ` +
		to + `, 'waiting_seq', ` + mark + `)::text)`
}

// RecordRunQuery is the consumers' one rule of order, for any number of
// events (a batch, or one event handled alone): "apply an aggregate's
// events that continue its position, without a gap". It locks each
// aggregate's position (in key order, so that two statements sharing
// aggregates wait on each other rather than deadlock) and, with the
// position at L, applies the events after L ranked 1, 2, 3... by seq while
// seq = L + rank; one update moves the position to the last of them; an
// aggregate without a position gets one at its run's end. An aggregate
// held behind a dead letter applies nothing, and an event in its
// consumer's dead letters breaks the run there. It inserts the dedupe
// records of the events it applied and of those without a seq (when rec).
//
// Its parameters are one array per column of the events: consumer, index,
// topic, aggregate type, aggregate id, seq (0 for none), event id, event
// name, whether to insert the dedupe record, attempts; no two events of
// one aggregate share a seq. It returns, per event index, whether it was
// applied (its position moved over it, or it has no seq and is not a dead
// letter) and whether its record is new (true when none is made). Without
// a positions table every event not in the dead letters is applied.
func (t Tables) RecordRunQuery() string { return t.cached(orderRecordRun) }

var orderRecordRun = define("order/record-run", func(t Tables) string {
	processed, letters := pgsql.QuoteIdent(t.Processed), pgsql.QuoteIdent(t.DeadLetters)
	v := `v AS (SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::uuid[], $8::text[], $9::bool[], $10::bigint[])
			AS v(consumer, i, topic, aggregate_type, aggregate_id, seq, event_id, event_name, rec, attempts)),
		free AS (SELECT * FROM v WHERE NOT EXISTS (SELECT 1 FROM ` + letters + ` d WHERE d.event_id = v.event_id AND d.source = v.consumer)),`
	applied := `applied AS (SELECT i FROM free)`
	if t.Positions != "" {
		applied = t.runApplied()
	}
	q := `WITH ` + v + `
		` + applied + `,
		done AS (
			INSERT INTO ` + processed + ` (consumer, event_id, event_name, attempts)
			SELECT v.consumer, v.event_id, v.event_name, v.attempts FROM v JOIN applied a ON a.i = v.i WHERE v.rec
			ORDER BY v.consumer, v.event_id
			ON CONFLICT (consumer, event_id) DO NOTHING
			RETURNING consumer, event_id)
		SELECT v.i, a.i IS NOT NULL, NOT v.rec OR EXISTS (SELECT 1 FROM done d WHERE d.consumer = v.consumer AND d.event_id = v.event_id)
		FROM v LEFT JOIN applied a ON a.i = v.i`
	return q
})

// The run of a consumer that does not keep order: no positions table.
var _ = define("order/record-run-unordered", func(t Tables) string {
	t.Positions = ""
	return orderRecordRun.SQL(t)
})

// runApplied is RecordRunQuery's part with positions: the events applied.
func (t Tables) runApplied() string {
	positions := pgsql.QuoteIdent(t.Positions)
	same := func(a, b string) string {
		return a + `.consumer = ` + b + `.consumer AND ` + a + `.topic = ` + b + `.topic AND ` +
			a + `.aggregate_type = ` + b + `.aggregate_type AND ` + a + `.aggregate_id = ` + b + `.aggregate_id`
	}
	return `keys AS (SELECT DISTINCT consumer, topic, aggregate_type, aggregate_id FROM v WHERE seq > 0),
		locked AS (
			SELECT p.id, p.consumer, p.topic, p.aggregate_type, p.aggregate_id, p.last_seq, p.held_seq FROM ` + positions + ` p
			JOIN keys k ON ` + same("p", "k") + `
			ORDER BY p.consumer, p.topic, p.aggregate_type, p.aggregate_id
			FOR UPDATE OF p),
		run AS (
			SELECT f.i, f.seq, l.id, l.last_seq + row_number() OVER (PARTITION BY l.id ORDER BY f.seq) AS want
			FROM free f JOIN locked l ON ` + same("f", "l") + `
			WHERE f.seq > l.last_seq AND l.held_seq IS NULL),
		moving AS (SELECT i, id, seq FROM run WHERE seq = want),
		moved AS (
			UPDATE ` + positions + ` p SET last_seq = m.top, ` + t.WaitingAfterMove("p", "m.top") + `, updated_at = now()
			FROM (SELECT id, max(seq) AS top FROM moving GROUP BY id) m WHERE p.id = m.id
			RETURNING p.id),
		first AS (
			SELECT f.i, f.consumer, f.topic, f.aggregate_type, f.aggregate_id, f.seq,
				row_number() OVER (PARTITION BY f.consumer, f.topic, f.aggregate_type, f.aggregate_id ORDER BY f.seq) AS want
			FROM free f WHERE f.seq > 0 AND NOT EXISTS (SELECT 1 FROM locked l WHERE ` + same("l", "f") + `)),
		made AS (
			INSERT INTO ` + positions + ` AS p (consumer, topic, aggregate_type, aggregate_id, last_seq, updated_at)
			SELECT consumer, topic, aggregate_type, aggregate_id, max(seq), now() FROM first WHERE seq = want
			GROUP BY consumer, topic, aggregate_type, aggregate_id
			ORDER BY consumer, topic, aggregate_type, aggregate_id
			ON CONFLICT (consumer, topic, aggregate_type, aggregate_id) DO UPDATE
			SET last_seq = excluded.last_seq, ` + t.WaitingAfterMove("p", "excluded.last_seq") + `, updated_at = now()
			WHERE p.last_seq = 0 AND p.held_seq IS NULL
			RETURNING p.consumer, p.topic, p.aggregate_type, p.aggregate_id),
		applied AS (
			SELECT m.i FROM moving m JOIN moved USING (id)
			UNION ALL SELECT f.i FROM made m JOIN first f ON ` + same("f", "m") + ` AND f.seq = f.want
			UNION ALL SELECT i FROM free WHERE seq = 0)`
}
