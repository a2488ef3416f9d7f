package outboxdb

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// The fast path's delivered log (relay Fast.DeliveredLog): what the relay
// delivered is recorded without rewriting the outbox rows.
//
//   - An ack inserts the delivered rows' ids into Tables.DeliveredLog, a
//     table of ids alone: a few bytes per event, where stamping
//     delivered_at writes the whole row again (a new tuple with its
//     payload, its index entries, their WAL).
//   - Now and then (FastLogSQL.Compact) the relay moves a floor over the
//     log, in Tables.DeliveredFloor: every row at or below its id whose
//     transaction its snapshot saw is delivered. The log entries under the
//     floor are then deleted, so the log holds a few seconds of
//     deliveries, and a claim that reads from the oldest row reads from
//     the floor instead of stepping over every retained row.
//
// A row is delivered by the log when its id is in the log, or when it is
// at or below the floor and visible in the floor's snapshot (FastLogged).
// The floor moves only over rows delivered by some path (in the log,
// stamped, or gone to the dead letters or to retention), and never while a
// row below it that its snapshot did not see is still pending: a late
// transaction's row keeps it where it is until it is delivered.

// The suffixes of the delivered log's tables.
const (
	deliveredLogSuffix   = "_delivered"
	deliveredFloorSuffix = "_delivered_to"
)

// DeliveredLog holds the ids of the rows the fast path delivered since
// the floor last moved.
func (t Tables) DeliveredLog() string { return t.Outbox + deliveredLogSuffix }

// DeliveredFloor holds the fast path's floor: one row, the id under which
// (with its snapshot) every row is delivered.
func (t Tables) DeliveredFloor() string { return t.Outbox + deliveredFloorSuffix }

// FastLogged is the condition that row o of t's outbox was delivered by
// the fast path's log: its id logged, or at or below the floor and seen by
// its snapshot. A row without a transaction id is never under the floor.
func (t Tables) FastLogged(o string) string {
	floor := pgsql.QuoteIdent(t.DeliveredFloor())
	return `(EXISTS (SELECT 1 FROM ` + pgsql.QuoteIdent(t.DeliveredLog()) + ` dl WHERE dl.id = ` + o + `.id) OR coalesce(` +
		o + `.id <= (SELECT df.upto FROM ` + floor + ` df) AND pg_visible_in_snapshot(` + o + `.transaction_id, (SELECT df.snap FROM ` +
		floor + ` df)), false))`
}

// belowFloor is the conditions, one per index that serves it, that
// together hold every row o of t's outbox that the delivered log's floor
// does not cover: the rows above it, the rows under it of the transactions
// its snapshot saw in progress, and rows without a transaction id.
func (t Tables) belowFloor(o string) []string {
	floor := pgsql.QuoteIdent(t.DeliveredFloor())
	upto, snap := `coalesce((SELECT df.upto FROM `+floor+` df), 0)`, `(SELECT df.snap FROM `+floor+` df)`
	return []string{
		o + `.id > ` + upto,
		o + `.transaction_id >= pg_snapshot_xmin(` + snap + `) AND ` + o + `.transaction_id < pg_snapshot_xmax(` + snap + `) AND ` +
			o + `.id <= ` + upto,
		o + `.transaction_id IS NULL AND ` + o + `.id <= ` + upto,
	}
}

var (
	fastLogCreate = define("fastpath/log-create", func(t Tables) string {
		return `CREATE TABLE IF NOT EXISTS ` + pgsql.QuoteIdent(t.DeliveredLog()) + ` (id bigint PRIMARY KEY);
CREATE TABLE IF NOT EXISTS ` + pgsql.QuoteIdent(t.DeliveredFloor()) + ` (
	one boolean PRIMARY KEY DEFAULT true CHECK (one),
	upto bigint NOT NULL,
	snap pg_snapshot NOT NULL);
INSERT INTO ` + pgsql.QuoteIdent(t.DeliveredFloor()) + ` (upto, snap) VALUES (0, pg_current_snapshot()) ON CONFLICT DO NOTHING`
	})
	// Acks commit without waiting for the WAL flush, as stamping does
	// (fastpath/delivered); the floor's move commits with the flush, which
	// makes the acks it read durable first.
	fastLogDelivered = define("fastpath/log-delivered", func(t Tables) string {
		return `INSERT INTO ` + pgsql.QuoteIdent(t.DeliveredLog()) + ` (id)
	SELECT unnest($1::bigint[]) FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async
	ON CONFLICT DO NOTHING`
	})
	fastLogFloor = define("fastpath/log-floor", func(t Tables) string {
		return `SELECT upto, pg_snapshot_xmax(snap)::text, array_to_string(ARRAY(SELECT pg_snapshot_xip(snap)), ',')
	FROM ` + pgsql.QuoteIdent(t.DeliveredFloor())
	})
	// The floor is read through scalar subqueries, so that the planner
	// reads one row of it and walks the outbox's indexes from it.
	fastLogCompact = define("fastpath/log-compact", func(t Tables) string {
		o, l, f := pgsql.QuoteIdent(t.Outbox), pgsql.QuoteIdent(t.DeliveredLog()), pgsql.QuoteIdent(t.DeliveredFloor())
		pending := `o.delivered_at IS NULL AND NOT EXISTS (SELECT 1 FROM ` + l + ` dl WHERE dl.id = o.id)`
		upto, snap := `(SELECT upto FROM st)`, `(SELECT snap FROM st)`
		return `WITH st AS MATERIALIZED (SELECT upto, snap FROM ` + f + ` FOR UPDATE),
-- A row below the floor that its snapshot did not see, still pending: the
-- floor stays until it is delivered (moving it would make the rows between
-- it and the new floor pending again). Only the snapshot's transactions in
-- progress can have such rows: one begun after it took its ids above the
-- floor.
-- (Fenced by OFFSET 0 from the LIMIT: the planner would walk the primary
-- key under the floor, every retained row, hoping for an early match.)
late AS (
	SELECT 1 FROM (SELECT o.id FROM ` + o + ` o
	WHERE o.transaction_id >= pg_snapshot_xmin(` + snap + `) AND o.transaction_id < pg_snapshot_xmax(` + snap + `)
	  AND o.id <= ` + upto + ` AND NOT pg_visible_in_snapshot(o.transaction_id, ` + snap + `) AND ` + pending + `
	OFFSET 0) l
	LIMIT 1),
first AS (
	SELECT o.id FROM ` + o + ` o WHERE o.id > ` + upto + ` AND ` + pending + ` ORDER BY o.id LIMIT 1),
-- Once: a subquery in the UPDATE's FROM would be pulled up and read first
-- for each of its uses.
next AS MATERIALIZED (
	SELECT coalesce((SELECT id - 1 FROM first), (SELECT max(id) FROM ` + o + `), 0) AS upto
	WHERE NOT EXISTS (SELECT 1 FROM late)),
moved AS (
	UPDATE ` + f + ` SET upto = n.upto, snap = pg_current_snapshot()
	FROM next n WHERE n.upto >= ` + upto + `
	RETURNING ` + f + `.upto)
-- Every entry under the new floor is covered by it: an entry this
-- statement sees was written after its row was claimed, so the row's
-- transaction had committed before this statement's snapshot.
DELETE FROM ` + l + ` dl WHERE dl.id <= (SELECT upto FROM moved)`
	})
	// fastLogDeleteOlder deletes up to $2 rows the delivered log
	// delivered that were written before $1 (they keep delivered_at NULL).
	fastLogDeleteOlder = define("fastpath/log-delete-older", func(t Tables) string {
		o := pgsql.QuoteIdent(t.Outbox)
		return `DELETE FROM ` + o + ` WHERE id IN (SELECT o.id FROM ` + o + ` o
	WHERE o.created_at < $1 AND o.delivered_at IS NULL AND ` + t.FastLogged("o") + `
	ORDER BY o.id LIMIT $2 FOR UPDATE OF o SKIP LOCKED)`
	})
)

// DeleteLogDelivered deletes, batch rows at a time (1000 when zero), the
// rows the delivered log says were delivered that were written before
// cutoff; nothing when t has no log.
func (t Tables) DeleteLogDelivered(ctx context.Context, db *sql.DB, cutoff time.Time, batch int) (int64, error) {
	has, err := t.HasDeliveredLog(ctx, db)
	if err != nil || !has {
		return 0, err
	}
	return t.deleteDelivered(ctx, db, fastLogDeleteOlder.SQL(t), cutoff, batch, "the delivered log")
}

// FastLogSQL is the text of the delivered log's statements, for one
// outbox table.
type FastLogSQL struct {
	// Create makes the log's tables, once.
	Create string
	// Delivered logs rows $1 (an array of ids) delivered.
	Delivered string
	// Floor reads the floor: its id, and its snapshot's xmax and the
	// transactions in progress in it (comma-separated).
	Floor string
	// Compact moves the floor as far as the rows delivered allow and
	// deletes the log entries under it.
	Compact string
}

// FastLog renders the delivered log's statements on t.
func (t Tables) FastLog() FastLogSQL {
	return FastLogSQL{Create: fastLogCreate.SQL(t), Delivered: fastLogDelivered.SQL(t), Floor: fastLogFloor.SQL(t),
		Compact: fastLogCompact.SQL(t)}
}

// HasDeliveredLog tells whether a fast relay kept a delivered log on t.
func (t Tables) HasDeliveredLog(ctx context.Context, q Querier) (bool, error) {
	if t.Dialect != Postgres {
		return false, nil
	}
	return TableExists(ctx, q, t.DeliveredFloor())
}

// ParseFloor reads the floor's snapshot as Floor returns it.
func ParseFloor(xmax, xip string) (from string, listed []string) {
	listed = []string{}
	if xip != "" {
		listed = strings.Split(xip, ",")
	}
	return xmax, listed
}
