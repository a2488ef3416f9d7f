package outboxdb

import (
	"fmt"
	"strings"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// ScheduledChannel is the channel Emit notifies when it schedules an
// event (outbox.ScheduledChannel returns it).
func ScheduledChannel(table string) string { return table }

// EmitSchedule builds the INSERT of scheduled rows into t.Scheduled, in
// their order. Each is due at its DeliverAt, or at the database's clock
// plus DeliverAfter. A row whose event id is already scheduled or in
// t.Outbox is skipped; the statement returns one row per row inserted,
// and notifies ScheduledChannel(t.Scheduled) at commit.
//
// With t.Sequences set, the counters of the rows' aggregates are locked
// (created at 0 when new) without taking a number: the aggregate's other
// writers wait until the transaction ends, so that the ids, which order
// events due at the same time, follow commit order within an aggregate.
// The number is taken when the event is due.
func (t Tables) EmitSchedule(rows []EmitRow) (string, []any) {
	var (
		q    strings.Builder
		args []any
	)
	q.WriteString("WITH ")
	if t.Sequences != "" {
		keys, _ := countByAggregate(rows)
		q.WriteString("locked AS (INSERT INTO " + pgsql.QuoteIdent(t.Sequences) + " AS s (topic, aggregate_type, aggregate_id, last_seq) VALUES ")
		for i, k := range keys {
			if i > 0 {
				q.WriteByte(',')
			}
			fmt.Fprintf(&q, "($%d::text,$%d::text,$%d::text,0)", len(args)+1, len(args)+2, len(args)+3)
			args = append(args, k.topic, k.typ, k.id)
		}
		q.WriteString(" ON CONFLICT (topic, aggregate_type, aggregate_id) DO UPDATE SET last_seq = s.last_seq RETURNING 1), ")
	}
	q.WriteString("inserted AS (INSERT INTO " + pgsql.QuoteIdent(t.Scheduled) +
		" (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers, readable_from, deliver_at)" +
		" SELECT v.event_id, v.event_name, v.event_version, v.topic, v.aggregate_type, v.aggregate_id, v.payload, v.headers," +
		" v.readable_from, COALESCE(v.deliver_at, clock_timestamp() + v.deliver_after * interval '1 microsecond') FROM (VALUES ")
	for i, r := range rows {
		if i > 0 {
			q.WriteByte(',')
		}
		n := len(args)
		fmt.Fprintf(&q, "($%d::uuid,$%d::text,$%d::int,$%d::text,$%d::text,$%d::text,$%d::jsonb,$%d::jsonb,$%d::int,$%d::timestamptz,$%d::bigint,$%d::int)",
			n+1, n+2, n+3, n+4, n+5, n+6, n+7, n+8, n+9, n+10, n+11, n+12)
		args = append(args, r.EventID, r.Name, r.Version, r.Topic, r.AggregateType, r.AggregateID,
			r.Payload, r.Headers, r.ReadableFrom, r.DeliverAt, r.DeliverAfter, i)
	}
	q.WriteString(") AS v (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers," +
		" readable_from, deliver_at, deliver_after, ord) WHERE NOT EXISTS (SELECT 1 FROM " + pgsql.QuoteIdent(t.Outbox) +
		" o WHERE o.event_id = v.event_id) ORDER BY v.ord ON CONFLICT (event_id) DO NOTHING RETURNING 1)" +
		" SELECT pg_notify(" + pgsql.QuoteLiteral(ScheduledChannel(t.Scheduled)) + ", '') FROM inserted")
	return q.String(), args
}

// EmitCancel cancels the scheduled event $1 while it waits: one row
// affected when it did.
var EmitCancel = define("emit/cancel", func(t Tables) string {
	return `UPDATE ` + pgsql.QuoteIdent(t.Scheduled) + ` SET cancelled_at = clock_timestamp() WHERE event_id = $1 AND cancelled_at IS NULL`
}).also(SQLite, func(t Tables) string {
	return `UPDATE ` + pgsql.QuoteIdent(t.Scheduled) + ` SET cancelled_at = CURRENT_TIMESTAMP WHERE event_id = ?1 AND cancelled_at IS NULL`
}).also(MySQL, func(t Tables) string {
	return `UPDATE ` + MySQL.quote(t.Scheduled) + ` SET cancelled_at = ` + mysqlNow + ` WHERE event_id = ?1 AND cancelled_at IS NULL`
})

// EmitCancelFind tells where the event $1 a cancel did not cancel is: in
// the scheduled events' table (cancelled already), and in the outbox (too
// late).
var EmitCancelFind = define("emit/cancel-find", func(t Tables) string {
	return `SELECT EXISTS (SELECT 1 FROM ` + pgsql.QuoteIdent(t.Scheduled) + ` WHERE event_id = $1), EXISTS (SELECT 1 FROM ` +
		pgsql.QuoteIdent(t.Outbox) + ` WHERE event_id = $1)`
}).also(SQLite, func(t Tables) string {
	return `SELECT EXISTS (SELECT 1 FROM ` + pgsql.QuoteIdent(t.Scheduled) + ` WHERE event_id = ?1), EXISTS (SELECT 1 FROM ` +
		pgsql.QuoteIdent(t.Outbox) + ` WHERE event_id = ?1)`
}).also(MySQL, func(t Tables) string {
	return `SELECT EXISTS (SELECT 1 FROM ` + MySQL.quote(t.Scheduled) + ` WHERE event_id = ?1), EXISTS (SELECT 1 FROM ` +
		MySQL.quote(t.Outbox) + ` WHERE event_id = ?1)`
})
