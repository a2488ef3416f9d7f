package outboxdb

// The consumers' statements on their positions, dedupe records and dead
// letters, besides the run statement (positions.go): each a named
// statement, rendered once per Tables, under a golden file
// (testdata/statements/order/). Their parameters are in each comment; the
// consumer package runs them.

import (
	"sync"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// queries caches the statements per tables and name: they run once or
// more per event handled, and rendering them is string work for nothing.
var queries sync.Map // queryKey -> string

type queryKey struct {
	t    Tables
	name string
}

// cached is s rendered for t, once per t.
func (t Tables) cached(s *Statement) string {
	k := queryKey{t, s.name}
	if q, ok := queries.Load(k); ok {
		return q.(string)
	}
	q := s.SQL(t)
	queries.Store(k, q)
	return q
}

// RecordProcessedQuery inserts the dedupe record of consumer $1, event $2
// named $3, attempts $4, unless there is one already (no row affected).
func (t Tables) RecordProcessedQuery() string { return t.cached(orderRecordProcessed) }

var orderRecordProcessed = define("order/record-processed", func(t Tables) string {
	return `INSERT INTO ` + pgsql.QuoteIdent(t.Processed) + ` (consumer, event_id, event_name, attempts)
		VALUES ($1, $2, $3, $4) ON CONFLICT (consumer, event_id) DO NOTHING`
})

// RecordDeliveryQuery is RecordProcessedQuery that also inserts nothing
// when consumer $1 set event $2 aside as a dead letter.
func (t Tables) RecordDeliveryQuery() string { return t.cached(orderRecordDelivery) }

var orderRecordDelivery = define("order/record-delivery", func(t Tables) string {
	return `INSERT INTO ` + pgsql.QuoteIdent(t.Processed) + ` (consumer, event_id, event_name, attempts)
		SELECT $1::text, $2::uuid, $3::text, $4::bigint
		WHERE NOT EXISTS (SELECT 1 FROM ` + pgsql.QuoteIdent(t.DeadLetters) + ` WHERE event_id = $2::uuid AND source = $1::text)
		ON CONFLICT (consumer, event_id) DO NOTHING`
})

// RecordRetriedQuery is RecordProcessedQuery for an event consumer $1 set
// aside and an operator retried (event $2 is a letter's retried event);
// it inserts nothing otherwise.
func (t Tables) RecordRetriedQuery() string { return t.cached(orderRecordRetried) }

var orderRecordRetried = define("order/record-retried", func(t Tables) string {
	return `INSERT INTO ` + pgsql.QuoteIdent(t.Processed) + ` (consumer, event_id, event_name, attempts)
		SELECT $1::text, $2::uuid, $3::text, $4::bigint
		WHERE EXISTS (SELECT 1 FROM ` + pgsql.QuoteIdent(t.DeadLetters) + ` WHERE retried_event_id = $2::uuid AND source = $1::text)
		ON CONFLICT (consumer, event_id) DO NOTHING`
})

// LockPositionQuery locks the position of consumer $1 on topic $2,
// aggregate $3/$4, making it (at 0) when there is none, for event $5 of
// seq $6. It returns the position's id, last_seq, held_seq,
// held_event_id, the seconds since waiting_since, whether the consumer
// has a dead letter of the event, and whether the event the aggregate
// waits for (held, or the next of a gap before $6) was discarded from the
// dead letters and must be skipped (SettleQuery).
func (t Tables) LockPositionQuery() string { return t.cached(orderLockPosition) }

var orderLockPosition = define("order/lock-position", func(t Tables) string {
	letters := pgsql.QuoteIdent(t.DeadLetters)
	return `INSERT INTO ` + pgsql.QuoteIdent(t.Positions) + ` AS p
		(consumer, topic, aggregate_type, aggregate_id, last_seq, updated_at) VALUES ($1, $2, $3, $4, 0, now())
		ON CONFLICT (consumer, topic, aggregate_type, aggregate_id) DO UPDATE SET last_seq = p.last_seq
		RETURNING p.id, p.last_seq, p.held_seq, p.held_event_id, EXTRACT(EPOCH FROM now() - p.waiting_since)::float8,
			EXISTS (SELECT 1 FROM ` + letters + ` WHERE event_id = $5 AND source = $1),
			CASE WHEN p.held_seq IS NOT NULL OR $6::bigint > p.last_seq + 1 THEN EXISTS (SELECT 1 FROM ` + letters + `
				WHERE source IN ($1, 'relay') AND topic = $2 AND aggregate_type = $3 AND aggregate_id = $4
					AND aggregate_seq = p.last_seq + 1 AND discarded_at IS NOT NULL AND retried_at IS NULL)
				AND NOT EXISTS (SELECT 1 FROM ` + letters + ` WHERE source = $1 AND topic = $2
					AND aggregate_type = $3 AND aggregate_id = $4 AND aggregate_seq = p.last_seq + 1
					AND event_id IS NOT NULL AND discarded_at IS NULL AND retried_at IS NULL) ELSE false END`
})

// moveReleasing is the SET items that move position p to seq to, releasing
// the aggregate when it was held there.
func (t Tables) moveReleasing(to string) string {
	return `last_seq = ` + to + `, ` + t.WaitingAfterMove("p", to) + `,
			held_event_id = CASE WHEN held_seq = ` + to + ` THEN NULL ELSE held_event_id END,
			held_at = CASE WHEN held_seq = ` + to + ` THEN NULL ELSE held_at END,
			held_seq = CASE WHEN held_seq = ` + to + ` THEN NULL ELSE held_seq END,
			updated_at = now()`
}

// ApplyQuery records event $2 named $3 (attempts $4) as processed by
// consumer $1 and moves position $6 to its seq $5, releasing the aggregate
// when it was held there, in one statement. It returns whether the dedupe
// record is new.
func (t Tables) ApplyQuery() string { return t.cached(orderApply) }

var orderApply = define("order/apply", func(t Tables) string {
	return `WITH done AS (
			INSERT INTO ` + pgsql.QuoteIdent(t.Processed) + ` (consumer, event_id, event_name, attempts)
			VALUES ($1, $2, $3, $4) ON CONFLICT (consumer, event_id) DO NOTHING RETURNING 1)
		UPDATE ` + pgsql.QuoteIdent(t.Positions) + ` AS p SET ` + t.moveReleasing("$5::bigint") + `
		WHERE id = $6 RETURNING EXISTS (SELECT 1 FROM done)`
})

// MoveQuery moves position $1 to seq $2, past an event not applied (passed
// over, or one the consumer has no handler for), releasing the aggregate
// when it was held at $2.
func (t Tables) MoveQuery() string { return t.cached(orderMove) }

var orderMove = define("order/move", func(t Tables) string {
	return `UPDATE ` + pgsql.QuoteIdent(t.Positions) + ` AS p SET ` + t.moveReleasing("$2::bigint") + `
		WHERE id = $1`
})

// HoldQuery holds position $1 at seq $2, the event $3 (NULL when the seq
// never arrived).
func (t Tables) HoldQuery() string { return t.cached(orderHold) }

var orderHold = define("order/hold", func(t Tables) string {
	return `UPDATE ` + pgsql.QuoteIdent(t.Positions) + ` SET held_seq = $2, held_event_id = $3, held_at = now(), updated_at = now()
		WHERE id = $1`
})

// NoteWaitingQuery notes that event seq $5 of consumer $1 on topic $2,
// aggregate $3/$4, waits for its predecessor: since when, if it is the
// first, and its seq, if it is the lowest (the mark on which a move wakes
// the waiters). Only a gap is noted: a duplicate or an event of a held
// aggregate waits for nothing, and must not start the clock of a later
// gap. It returns the position as PositionQuery does.
func (t Tables) NoteWaitingQuery() string { return t.cached(orderNoteWaiting) }

var orderNoteWaiting = define("order/note-waiting", func(t Tables) string {
	gap := `$5::bigint > p.last_seq + 1 AND p.held_seq IS NULL`
	return `INSERT INTO ` + pgsql.QuoteIdent(t.Positions) + ` AS p
		(consumer, topic, aggregate_type, aggregate_id, last_seq, waiting_since, waiting_seq, updated_at)
		VALUES ($1, $2, $3, $4, 0, CASE WHEN $5::bigint > 1 THEN now() END, CASE WHEN $5::bigint > 1 THEN $5::bigint END, now())
		ON CONFLICT (consumer, topic, aggregate_type, aggregate_id) DO UPDATE
		SET waiting_since = CASE WHEN ` + gap + ` THEN COALESCE(p.waiting_since, now()) ELSE p.waiting_since END,
			waiting_seq = CASE WHEN ` + gap + ` THEN LEAST(p.waiting_seq, $5::bigint) ELSE p.waiting_seq END
		RETURNING p.last_seq, p.held_seq IS NOT NULL, EXTRACT(EPOCH FROM now() - p.waiting_since)::float8, p.waiting_seq`
})

// StartAggregateQuery starts the aggregate $3/$4 on topic $2, to which
// consumer $1 applied nothing, at its lowest waiting seq, once that waited
// $5 seconds, and wakes the waiters (the lowest may wait in another
// instance). It returns that seq, no row when it started nothing.
func (t Tables) StartAggregateQuery() string { return t.cached(orderStartAggregate) }

var orderStartAggregate = define("order/start-aggregate", func(t Tables) string {
	return `WITH started AS (UPDATE ` + pgsql.QuoteIdent(t.Positions) + ` SET last_seq = waiting_seq - 1, updated_at = now()
			WHERE consumer = $1 AND topic = $2 AND aggregate_type = $3 AND aggregate_id = $4
				AND last_seq = 0 AND held_seq IS NULL AND waiting_seq > 1
				AND waiting_since <= now() - make_interval(secs => $5)
			RETURNING consumer, topic, aggregate_type, aggregate_id, waiting_seq)
		SELECT waiting_seq FROM started CROSS JOIN LATERAL ` + t.NotifyWaiters("started", "started.waiting_seq - 1", "started.waiting_seq")
})

// PositionQuery reads the position of consumer $1 on topic $2, aggregate
// $3/$4, without locking it: last_seq, whether it is held, the seconds
// since waiting_since, and the waiting mark.
func (t Tables) PositionQuery() string { return t.cached(orderPosition) }

var orderPosition = define("order/position", func(t Tables) string {
	return `SELECT last_seq, held_seq IS NOT NULL, EXTRACT(EPOCH FROM now() - waiting_since)::float8, waiting_seq
		FROM ` + pgsql.QuoteIdent(t.Positions) + ` WHERE consumer = $1 AND topic = $2 AND aggregate_type = $3 AND aggregate_id = $4`
})

// RetriedBackQuery tells whether event $2, set aside by consumer $1, was
// retried from its dead letters within the last $3 seconds and is not in
// them again: it is on its way back, and the events held behind it wait
// for it rather than going to the dead letters behind it.
func (t Tables) RetriedBackQuery() string { return t.cached(orderRetriedBack) }

var orderRetriedBack = define("order/retried-back", func(t Tables) string {
	letters := pgsql.QuoteIdent(t.DeadLetters)
	return `SELECT EXISTS (SELECT 1 FROM ` + letters + ` WHERE source = $1 AND retried_event_id = $2
				AND retried_at > now() - make_interval(secs => $3))
			AND NOT EXISTS (SELECT 1 FROM ` + letters + ` WHERE source = $1 AND event_id = $2)`
})

// HeldAtQuery tells whether the position of consumer $1 on topic $2,
// aggregate $3/$4, is held at seq $5.
func (t Tables) HeldAtQuery() string { return t.cached(orderHeldAt) }

var orderHeldAt = define("order/held-at", func(t Tables) string {
	return `SELECT EXISTS (SELECT 1 FROM ` + pgsql.QuoteIdent(t.Positions) + `
				WHERE consumer = $1 AND topic = $2 AND aggregate_type = $3 AND aggregate_id = $4 AND held_seq = $5)`
})
