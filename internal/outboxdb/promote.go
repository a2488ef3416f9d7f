package outboxdb

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// NotifyChannel is outbox.NotifyChannel, the channel Emit notifies and
// the fast relay listens on (package outbox imports this one; a test holds
// them equal).
func NotifyChannel(table string) string { return table }

// PromoteLockKey is the SQL expression keying the advisory lock one
// promotion of scheduled table holds: one promotion at a time, across
// relays. It hashes the table's oid, not its name, since advisory locks
// are the database's: the same name in another schema is another table,
// whose promotions must not hold back this one's.
func PromoteLockKey(scheduled string) string {
	return `hashtextextended('entoutbox_promote:' || to_regclass(` + pgsql.QuoteLiteral(pgsql.QuoteIdent(scheduled)) + `)::oid::text, 0)`
}

// PromoteQuery is the statement that moves up to $1 due events of the
// scheduled table into the outbox, in one transaction of its own: the
// event is in one table or the other, never both, never neither.
//
// Due is by the database's clock, read once (an InitPlan, so the
// (deliver_at, id) index serves the range). Pending rows locked by a
// Cancel in progress are skipped, as are those whose event id the outbox
// already holds (they would fail every promotion; they stay to be seen).
// Each aggregate's counter in the sequence table (none when it is empty:
// aggregate_seq NULL, as Emit does) is raised once by its count; within an
// aggregate the rows are numbered by (deliver_at, id), and inserted in
// that order. The events of an aggregate whose counter another
// transaction holds (an Emit of it not yet committed) wait for the next
// promotion: waiting for the counter would hold back every other
// aggregate's events as long as that transaction lasts, and deadlock if it
// cancels one of the events locked here. The headers
// gain events.MetaDeliverAt. It notifies the outbox's channel so the fast
// relay wakes.
//
// It runs only under pg_try_advisory_xact_lock(PromoteLockKey): it returns
// one row, whether it got the lock and how many events it moved.
func (t Tables) PromoteQuery() string { return promoteDue.SQL(t) }

var promoteDue = define("promote/promote", func(t Tables) string {
	s, o := pgsql.QuoteIdent(t.Scheduled), pgsql.QuoteIdent(t.Outbox)
	q := `WITH lock AS (SELECT pg_try_advisory_xact_lock(` + PromoteLockKey(t.Scheduled) + `) AS got),
due AS (SELECT s.id, s.topic, s.aggregate_type, s.aggregate_id FROM ` + s + ` s WHERE (SELECT got FROM lock)
	AND s.cancelled_at IS NULL AND s.deliver_at <= (SELECT clock_timestamp())
	AND NOT EXISTS (SELECT 1 FROM ` + o + ` o WHERE o.event_id = s.event_id)
	ORDER BY s.deliver_at, s.id LIMIT $1 FOR UPDATE OF s SKIP LOCKED),
`
	seq := "NULL::bigint"
	from := "moved m"
	if t.Sequences == "" {
		q += `moved AS (DELETE FROM ` + s + ` s USING due d WHERE s.id = d.id RETURNING s.*),
`
	} else {
		seqs := pgsql.QuoteIdent(t.Sequences)
		q += `free AS (SELECT c.topic, c.aggregate_type, c.aggregate_id FROM ` + seqs + ` c
	WHERE (c.topic, c.aggregate_type, c.aggregate_id) IN (SELECT topic, aggregate_type, aggregate_id FROM due)
	FOR UPDATE SKIP LOCKED),
moved AS (DELETE FROM ` + s + ` s USING due d WHERE s.id = d.id
	AND (EXISTS (SELECT 1 FROM free f WHERE (f.topic, f.aggregate_type, f.aggregate_id) = (d.topic, d.aggregate_type, d.aggregate_id))
		OR NOT EXISTS (SELECT 1 FROM ` + seqs + ` c WHERE (c.topic, c.aggregate_type, c.aggregate_id) = (d.topic, d.aggregate_type, d.aggregate_id)))
	RETURNING s.*),
counts AS (SELECT topic, aggregate_type, aggregate_id, count(*) AS n FROM moved GROUP BY 1, 2, 3),
numbered AS (INSERT INTO ` + seqs + ` AS c (topic, aggregate_type, aggregate_id, last_seq)
	SELECT topic, aggregate_type, aggregate_id, n FROM counts ORDER BY 1, 2, 3
	ON CONFLICT (topic, aggregate_type, aggregate_id) DO UPDATE SET last_seq = c.last_seq + EXCLUDED.last_seq
	RETURNING topic, aggregate_type, aggregate_id, last_seq),
`
		seq = `n.last_seq - c.n + row_number() OVER (PARTITION BY m.topic, m.aggregate_type, m.aggregate_id ORDER BY m.deliver_at, m.id)`
		from = "moved m JOIN counts c USING (topic, aggregate_type, aggregate_id) JOIN numbered n USING (topic, aggregate_type, aggregate_id)"
	}
	q += `inserted AS (INSERT INTO ` + o + ` (event_id, event_name, event_version, topic, aggregate_type, aggregate_id,
		payload, headers, readable_from, aggregate_seq)
	SELECT m.event_id, m.event_name, m.event_version, m.topic, m.aggregate_type, m.aggregate_id, m.payload,
		CASE WHEN jsonb_typeof(m.headers) = 'object' THEN m.headers ELSE '{}'::jsonb END || jsonb_build_object(` +
		pgsql.QuoteLiteral(events.MetaDeliverAt) + `,
			to_char(m.deliver_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
		m.readable_from, ` + seq + `
	FROM ` + from + ` ORDER BY m.deliver_at, m.id RETURNING 1)
SELECT (SELECT got FROM lock), (SELECT count(*) FROM inserted),
	(SELECT count(*) FROM (SELECT pg_notify(` + pgsql.QuoteLiteral(NotifyChannel(t.Outbox)) + `, '') FROM inserted LIMIT 1) x)`
	return q
})

// The promotion without a sequence table: aggregate_seq NULL.
var _ = define("promote/promote-unnumbered", func(t Tables) string {
	t.Sequences = ""
	return promoteDue.SQL(t)
})

// Promote moves up to limit due events of the scheduled table into the
// outbox (PromoteQuery); locked is false when another promotion held the
// lock, and then nothing moved.
func (t Tables) Promote(ctx context.Context, q Querier, limit int) (moved int, locked bool, err error) {
	if t.Dialect != Postgres {
		moved, err = t.promoteSerial(ctx, q, limit)
		if err != nil {
			return 0, false, fmt.Errorf("moving the due events of %s into %s: %w", t.Scheduled, t.Outbox, err)
		}
		return moved, true, nil
	}
	var notified int
	if err := queryRow(ctx, q, t.PromoteQuery(), []any{limit}, &locked, &moved, &notified); err != nil {
		return 0, false, fmt.Errorf("moving the due events of %s into %s: %w", t.Scheduled, t.Outbox, err)
	}
	return moved, locked, nil
}

// NextDue is how long, by the database's clock, until the earliest
// pending event of the scheduled table is due: zero or less when one is
// due now, false when none is pending (or those pending are stuck: their
// event id is in the outbox already, see PromoteQuery).
func (t Tables) NextDue(ctx context.Context, q Querier) (time.Duration, bool, error) {
	var us sql.NullInt64
	if err := queryRow(ctx, t.bound(q), promoteNextDue.SQL(t), nil, &us); err != nil {
		if err == sql.ErrNoRows {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("reading when the next event of %s is due: %w", t.Scheduled, err)
	}
	return time.Duration(us.Int64) * time.Microsecond, us.Valid, nil
}

// promoteNextDue reads the microseconds until the earliest pending
// scheduled event is due.
var promoteNextDue = define("promote/next-due", func(t Tables) string {
	return `SELECT (EXTRACT(EPOCH FROM s.deliver_at - clock_timestamp()) * 1000000)::bigint
		FROM ` + pgsql.QuoteIdent(t.Scheduled) + ` s WHERE s.cancelled_at IS NULL
		AND NOT EXISTS (SELECT 1 FROM ` + pgsql.QuoteIdent(t.Outbox) + ` o WHERE o.event_id = s.event_id)
		ORDER BY s.deliver_at, s.id LIMIT 1`
}).also(SQLite, func(t Tables) string {
	return `SELECT CAST(ROUND((julianday(s.deliver_at) - julianday('now')) * 86400000000.0) AS INTEGER)
		FROM ` + pgsql.QuoteIdent(t.Scheduled) + ` s WHERE s.cancelled_at IS NULL
		AND NOT EXISTS (SELECT 1 FROM ` + pgsql.QuoteIdent(t.Outbox) + ` o WHERE o.event_id = s.event_id)
		ORDER BY julianday(s.deliver_at), s.id LIMIT 1`
})
