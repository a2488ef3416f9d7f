package outboxdb

import (
	"context"
	"fmt"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// Settling a consumer's position on one aggregate after a repair of its
// dead letters (a discard, a retry, a held event applied), so that the
// aggregate always ends moving or visibly held behind a letter a command
// acts on:
//
//   - an event whose letter was discarded (the consumer's own, or the
//     relay's: never sent) is skipped: the position moves past it when it
//     is the next one, and past each discarded one after it;
//   - the aggregate is then held at its next event when that one's letter
//     of the consumer is open (set aside behind the one skipped: retry it,
//     or discard it to skip it too), and no longer held otherwise;
//   - a position that did not move keeps its hold (a retried event on its
//     way back, or one that never arrived), and takes one at an open letter
//     of its next event.
//
// The statement locks the position row; it changes nothing when there is
// nothing to settle. A position that moves keeps the mark of an event
// waiting beyond it (its wait starts anew) and wakes the handler sets that
// wait on it, as the consumer's own moves do (the channel is the
// positions table's name, the payload the consumer's moveNote).

// SettleQuery is the statement that settles the position of consumer $1 on
// topic $2, aggregate $3/$4; it returns the position's last_seq and
// held_seq after it, and whether it changed them.
func (t Tables) SettleQuery() string { return settlePosition.SQL(t) }

var settlePosition = define("settle/settle", func(t Tables) string {
	p, d := pgsql.QuoteIdent(t.Positions), pgsql.QuoteIdent(t.DeadLetters)
	return `WITH RECURSIVE pos AS (
		SELECT id, last_seq, held_seq, held_event_id FROM ` + p + `
		WHERE consumer = $1 AND topic = $2 AND aggregate_type = $3 AND aggregate_id = $4 FOR UPDATE),
	letters AS (
		SELECT aggregate_seq AS seq, event_id, discarded_at IS NOT NULL AS discarded, source = $1 AS own
		FROM ` + d + `
		WHERE source IN ($1, 'relay') AND topic = $2 AND aggregate_type = $3 AND aggregate_id = $4
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
		ORDER BY l.event_id LIMIT 1),
	target AS (
		SELECT moved.id, moved.last_seq, moved.to_seq,
			CASE WHEN moved.to_seq = moved.last_seq AND moved.held_seq IS NOT NULL THEN moved.held_seq ELSE next.seq END AS held_seq,
			CASE WHEN moved.to_seq = moved.last_seq AND moved.held_seq IS NOT NULL THEN moved.held_event_id ELSE next.event_id END AS held_event_id
		FROM moved LEFT JOIN next ON next.id = moved.id),
	settled AS (
		UPDATE ` + p + ` AS p SET last_seq = target.to_seq,
			held_seq = target.held_seq, held_event_id = target.held_event_id,
			held_at = CASE WHEN target.held_seq IS NULL THEN NULL
				WHEN target.held_seq IS NOT DISTINCT FROM p.held_seq THEN p.held_at ELSE now() END,
			waiting_since = CASE WHEN target.to_seq = p.last_seq THEN p.waiting_since
				WHEN p.waiting_seq > target.to_seq THEN now() END,
			waiting_seq = CASE WHEN p.waiting_seq > target.to_seq THEN p.waiting_seq END,
			updated_at = now()
		FROM target
		WHERE p.id = target.id AND (target.to_seq <> p.last_seq OR target.held_seq IS DISTINCT FROM p.held_seq
			OR target.held_event_id IS DISTINCT FROM p.held_event_id)
		RETURNING p.consumer, p.topic, p.aggregate_type, p.aggregate_id, p.last_seq, p.held_seq, p.waiting_seq,
			target.last_seq AS was)
	SELECT last_seq, coalesce(held_seq, 0), true FROM settled
		WHERE was = last_seq OR waiting_seq IS NULL OR ` + t.NotifyWaiters("settled", "settled.last_seq", "settled.waiting_seq") + ` IS NOT NULL
	UNION ALL
	SELECT last_seq, coalesce(held_seq, 0), false FROM pos WHERE NOT EXISTS (SELECT 1 FROM settled)`
})

// Settled is a position after SettleQuery.
type Settled struct {
	LastSeq, HeldSeq int64 // HeldSeq 0 when not held
	Changed          bool
	Found            bool // the consumer has a position on the aggregate
}

// Settle runs SettleQuery for consumer on the aggregate.
func (t Tables) Settle(ctx context.Context, q Querier, consumer, topic, aggregateType, aggregateID string) (Settled, error) {
	if t.Dialect == MySQL {
		s, err := t.settleSerial(ctx, q, consumer, topic, aggregateType, aggregateID)
		if err != nil {
			err = fmt.Errorf("settling the position of %q on aggregate %s/%s: %w", consumer, aggregateType, aggregateID, err)
		}
		return s, err
	}
	var s Settled
	rows, err := q.QueryContext(ctx, t.SettleQuery(), consumer, topic, aggregateType, aggregateID)
	if err != nil {
		return s, fmt.Errorf("settling the position of %q on aggregate %s/%s: %w", consumer, aggregateType, aggregateID, err)
	}
	defer rows.Close()
	if rows.Next() {
		s.Found = true
		if err := rows.Scan(&s.LastSeq, &s.HeldSeq, &s.Changed); err != nil {
			return s, err
		}
	}
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("settling the position of %q on aggregate %s/%s: %w", consumer, aggregateType, aggregateID, err)
	}
	return s, nil
}

// PositionsOf lists the consumers with a position on the aggregate.
func (t Tables) PositionsOf(ctx context.Context, q Querier, topic, aggregateType, aggregateID string) ([]string, error) {
	rows, err := t.bound(q).QueryContext(ctx, settlePositionsOf.SQL(t), topic, aggregateType, aggregateID)
	if err != nil {
		return nil, fmt.Errorf("reading the positions of aggregate %s/%s: %w", aggregateType, aggregateID, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// settlePositionsOf reads the consumers with a position on aggregate
// $2/$3 of topic $1.
var settlePositionsOf = define("settle/positions-of", func(t Tables) string {
	return `SELECT consumer FROM ` + pgsql.QuoteIdent(t.Positions) + `
		WHERE topic = $1 AND aggregate_type = $2 AND aggregate_id = $3 ORDER BY consumer`
})
