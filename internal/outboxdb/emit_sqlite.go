package outboxdb

import (
	"fmt"
	"strings"
	"time"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// A Write is one statement of a write, with its arguments.
type Write struct {
	SQL  string
	Args []any
}

// EmitWrites are the statements that write rows as Emit does, to run in
// order in the emitting transaction; the last one's rows affected is the
// number of rows it inserted (the others skipped as duplicates, see
// EmitInsert). PostgreSQL takes one statement, EmitInsert; MySQL one,
// after EmitAhead (see emit_mysql.go). SQLite has no
// INSERT inside a WITH and no NOTIFY: its counters move first, by as
// many numbers as each aggregate has rows, and the insert then reads
// them. SQLite lets one transaction write at a time, so the counters need
// no lock to number without gaps in commit order.
func (t Tables) EmitWrites(rows []EmitRow) []Write {
	switch t.Dialect {
	case Postgres:
		q, args := t.EmitInsert(rows)
		return []Write{{q, args}}
	case MySQL: // numbered ahead (EmitAhead)
		return []Write{t.mysqlInsert(rows, "v.seq")}
	}
	var writes []Write
	seq := "v.seq"
	if t.Sequences != "" {
		writes = append(writes, t.sqliteCount(rows))
		seq = "(SELECT s.last_seq FROM " + pgsql.QuoteIdent(t.Sequences) + " s WHERE s.topic = v.topic" +
			" AND s.aggregate_type = v.aggregate_type AND s.aggregate_id = v.aggregate_id) - v.back"
	}
	return append(writes, t.sqliteInsert(rows, seq))
}

// sqliteCount moves the counters of rows' aggregates on by their rows,
// creating those that are new.
func (t Tables) sqliteCount(rows []EmitRow) Write {
	keys, counts := countByAggregate(rows)
	var (
		q    strings.Builder
		args = make([]any, 0, 4*len(keys))
	)
	q.WriteString("INSERT INTO " + pgsql.QuoteIdent(t.Sequences) + " (topic, aggregate_type, aggregate_id, last_seq) VALUES ")
	for i, k := range keys {
		if i > 0 {
			q.WriteByte(',')
		}
		q.WriteString("(?,?,?,?)")
		args = append(args, k.topic, k.typ, k.id, counts[k])
	}
	q.WriteString(" ON CONFLICT (topic, aggregate_type, aggregate_id) DO UPDATE SET last_seq = last_seq + excluded.last_seq")
	return Write{q.String(), args}
}

// sqliteInsert inserts rows in their order, each numbered by seq (an
// expression on v, a row), skipping an event id already in the outbox or
// waiting in t.Scheduled.
func (t Tables) sqliteInsert(rows []EmitRow, seq string) Write {
	const rowColumns = 12
	var (
		q    strings.Builder
		args = make([]any, 0, rowColumns*len(rows))
	)
	q.WriteString("WITH v (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers," +
		" readable_from, seq, back, ord) AS (VALUES ")
	_, counts := countByAggregate(rows)
	back := backs(rows, counts)
	for i, r := range rows {
		if i > 0 {
			q.WriteByte(',')
		}
		q.WriteString("(?,?,?,?,?,?,?,?,?,?,?,?)")
		args = append(args, r.EventID, r.Name, r.Version, r.Topic, r.AggregateType, r.AggregateID,
			r.Payload, r.Headers, r.ReadableFrom, r.Seq, back[i], i)
	}
	q.WriteString(") INSERT INTO " + pgsql.QuoteIdent(t.Outbox) +
		" (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers, readable_from, aggregate_seq)" +
		" SELECT v.event_id, v.event_name, v.event_version, v.topic, v.aggregate_type, v.aggregate_id, v.payload, v.headers," +
		" v.readable_from, " + seq + " FROM v WHERE ")
	if t.Scheduled != "" {
		q.WriteString(notScheduled(t.Scheduled))
	} else {
		q.WriteString("true") // SQLite reads ON CONFLICT after a SELECT only past a WHERE
	}
	q.WriteString(" ORDER BY v.ord ON CONFLICT (event_id) DO NOTHING")
	return Write{q.String(), args}
}

// ScheduleWrites are the statements that schedule rows as Emit does
// (EmitSchedule), the last one's rows affected the number scheduled. On
// SQLite, which shares the process's clock, a row due after a delay is
// due at the time now plus the delay, and the aggregate's counter needs
// no lock (one transaction writes at a time).
func (t Tables) ScheduleWrites(rows []EmitRow, now time.Time) []Write {
	switch t.Dialect {
	case Postgres:
		q, args := t.EmitSchedule(rows)
		return []Write{{q, args}}
	case MySQL:
		return t.mysqlSchedule(rows)
	}
	const rowColumns = 11
	var (
		q    strings.Builder
		args = make([]any, 0, rowColumns*len(rows))
	)
	q.WriteString("WITH v (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers," +
		" readable_from, deliver_at, ord) AS (VALUES ")
	for i, r := range rows {
		if i > 0 {
			q.WriteByte(',')
		}
		due := now.Add(time.Duration(r.DeliverAfter) * time.Microsecond)
		if t, ok := r.DeliverAt.(time.Time); ok {
			due = t
		}
		at := sqliteTime(due)
		q.WriteString("(?,?,?,?,?,?,?,?,?,?,?)")
		args = append(args, r.EventID, r.Name, r.Version, r.Topic, r.AggregateType, r.AggregateID,
			r.Payload, r.Headers, r.ReadableFrom, at, i)
	}
	fmt.Fprintf(&q, ") INSERT INTO %s (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload,"+
		" headers, readable_from, deliver_at) SELECT v.event_id, v.event_name, v.event_version, v.topic, v.aggregate_type,"+
		" v.aggregate_id, v.payload, v.headers, v.readable_from, v.deliver_at FROM v WHERE NOT EXISTS (SELECT 1 FROM %s o"+
		" WHERE o.event_id = v.event_id) ORDER BY v.ord ON CONFLICT (event_id) DO NOTHING",
		pgsql.QuoteIdent(t.Scheduled), pgsql.QuoteIdent(t.Outbox))
	return []Write{{q.String(), args}}
}

// ThisTransaction is PostgreSQL's id of the transaction running the
// statement, as the outbox's transaction_id column keeps it.
const ThisTransaction = "pg_current_xact_id()"

// sqliteTime is t as SQLite's date functions read it (julianday compares
// what the promoter reads), in UTC: a driver's own form of a time.Time
// parameter may be one they do not read.
func sqliteTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000000") }
