package outboxdb

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// EmitRow is one event as the emit path writes it (package outbox builds
// it from its Row), each column's value ready for the statement.
type EmitRow struct {
	EventID                           string
	Name                              string
	Version                           int
	Topic, AggregateType, AggregateID string
	Payload                           string
	// Headers is the JSON object's text, or nil for none; ReadableFrom an
	// int, or nil when only consumers of Version read it; Seq the
	// aggregate_seq the row keeps, or nil (an unnumbered insert only).
	Headers, ReadableFrom, Seq any
	// A scheduled row is due at DeliverAt (a time), or when it is nil at
	// the database's clock plus DeliverAfter microseconds.
	DeliverAt    any
	DeliverAfter int64
}

// emitColumns is how many parameters a row of the unnumbered insert takes.
const emitColumns = 10

// EmitInsert builds the INSERT of rows into t.Outbox, in their order, as
// Emit writes them. A row whose event id is already present is skipped
// (ON CONFLICT DO NOTHING), as is one whose event id waits in t.Scheduled
// when it is set; the statement returns one row per row inserted, and
// notifies NotifyChannel(t.Outbox) once per row at commit. With
// t.Sequences set, each row is numbered in its aggregate's order on its
// topic from the counters there, in the same statement; without, rows
// keep the Seq they carry.
func (t Tables) EmitInsert(rows []EmitRow) (string, []any) {
	if t.Sequences != "" {
		return t.emitInsertNumbered(rows)
	}
	var (
		q    strings.Builder
		args = make([]any, 0, emitColumns*len(rows))
	)
	q.WriteString("WITH inserted AS (INSERT INTO " + pgsql.QuoteIdent(t.Outbox) +
		" (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers, readable_from, aggregate_seq) ")
	cell := "($%d,$%d,$%d,$%d,$%d,$%d,$%d::jsonb,$%d::jsonb,$%d::bigint,$%d::bigint)"
	if t.Scheduled == "" {
		q.WriteString("VALUES ")
	} else {
		// Typed: the VALUES are read by a SELECT, not by the INSERT.
		cell = "($%d::uuid,$%d::text,$%d::int,$%d::text,$%d::text,$%d::text,$%d::jsonb,$%d::jsonb,$%d::int,$%d::bigint)"
		q.WriteString("SELECT * FROM (VALUES ")
	}
	for i, r := range rows {
		if i > 0 {
			q.WriteByte(',')
		}
		n := i * emitColumns
		fmt.Fprintf(&q, cell, n+1, n+2, n+3, n+4, n+5, n+6, n+7, n+8, n+9, n+10)
		args = append(args, r.EventID, r.Name, r.Version, r.Topic, r.AggregateType, r.AggregateID,
			r.Payload, r.Headers, r.ReadableFrom, r.Seq)
	}
	if t.Scheduled != "" {
		q.WriteString(") AS v (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers," +
			" readable_from, aggregate_seq) WHERE " + notScheduled(t.Scheduled))
	}
	// One statement: the insert, and a notification the fast relay gets
	// at commit. It returns one row per inserted row, so the rows affected
	// still tell a duplicate apart.
	q.WriteString(" ON CONFLICT (event_id) DO NOTHING RETURNING 1) SELECT pg_notify(" +
		pgsql.QuoteLiteral(NotifyChannel(t.Outbox)) + ", '') FROM inserted")
	return q.String(), args
}

// notScheduled is the condition that the row v's event id is not waiting
// in scheduled: an id is one event, sent now or later, never both.
func notScheduled(scheduled string) string {
	return "NOT EXISTS (SELECT 1 FROM " + pgsql.QuoteIdent(scheduled) + " s WHERE s.event_id = v.event_id)"
}

// emitInsertNumbered is EmitInsert numbering the rows from the counters
// of t.Sequences. The counter rows stay locked until the transaction ends:
// the aggregate's other writers wait, so the numbers have no gaps (a
// rolled back transaction gives its numbers back) and follow commit
// order. Rows are inserted in their order, after the numbers are taken,
// so an aggregate's ids follow its numbers too.
func (t Tables) emitInsertNumbered(rows []EmitRow) (string, []any) {
	keys, counts := countByAggregate(rows)
	const rowColumns = 11
	var (
		q    strings.Builder
		args = make([]any, 0, 4*len(keys)+rowColumns*len(rows))
	)
	q.WriteString("WITH numbered AS (INSERT INTO " + pgsql.QuoteIdent(t.Sequences) + " AS s (topic, aggregate_type, aggregate_id, last_seq) VALUES ")
	for i, k := range keys {
		if i > 0 {
			q.WriteByte(',')
		}
		fmt.Fprintf(&q, "($%d::text,$%d::text,$%d::text,$%d::bigint)", len(args)+1, len(args)+2, len(args)+3, len(args)+4)
		args = append(args, k.topic, k.typ, k.id, counts[k])
	}
	q.WriteString(" ON CONFLICT (topic, aggregate_type, aggregate_id) DO UPDATE SET last_seq = s.last_seq + EXCLUDED.last_seq" +
		" RETURNING topic, aggregate_type, aggregate_id, last_seq), inserted AS (INSERT INTO " + pgsql.QuoteIdent(t.Outbox) +
		" (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers, readable_from, aggregate_seq)" +
		" SELECT v.event_id, v.event_name, v.event_version, v.topic, v.aggregate_type, v.aggregate_id, v.payload, v.headers," +
		" v.readable_from, n.last_seq - v.back FROM (VALUES ")
	back := backs(rows, counts)
	for i, r := range rows {
		if i > 0 {
			q.WriteByte(',')
		}
		n := len(args)
		fmt.Fprintf(&q, "($%d::uuid,$%d::text,$%d::int,$%d::text,$%d::text,$%d::text,$%d::jsonb,$%d::jsonb,$%d::int,$%d::bigint,$%d::int)",
			n+1, n+2, n+3, n+4, n+5, n+6, n+7, n+8, n+9, n+10, n+11)
		args = append(args, r.EventID, r.Name, r.Version, r.Topic, r.AggregateType, r.AggregateID,
			r.Payload, r.Headers, r.ReadableFrom, back[i], i)
	}
	q.WriteString(") AS v (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers," +
		" readable_from, back, ord) JOIN numbered n USING (topic, aggregate_type, aggregate_id)")
	if t.Scheduled != "" {
		q.WriteString(" WHERE " + notScheduled(t.Scheduled))
	}
	q.WriteString(" ORDER BY v.ord" +
		" ON CONFLICT (event_id) DO NOTHING RETURNING 1) SELECT pg_notify(" +
		pgsql.QuoteLiteral(NotifyChannel(t.Outbox)) + ", '') FROM inserted")
	return q.String(), args
}

// EmitGiveBack gives back the number a duplicate event took from its
// aggregate's counter ($1 topic, $2 aggregate type, $3 aggregate id), so
// that its transaction goes on without a gap (the counter is still locked
// by it).
var EmitGiveBack = define("emit/give-back-number", func(t Tables) string {
	return `UPDATE ` + pgsql.QuoteIdent(t.Sequences) + ` SET last_seq = last_seq - 1
				WHERE topic = $1 AND aggregate_type = $2 AND aggregate_id = $3`
}).also(SQLite, func(t Tables) string {
	return `UPDATE ` + pgsql.QuoteIdent(t.Sequences) + ` SET last_seq = last_seq - 1
				WHERE topic = ?1 AND aggregate_type = ?2 AND aggregate_id = ?3`
}).also(MySQL, func(t Tables) string {
	return `UPDATE ` + MySQL.quote(t.Sequences) + ` SET last_seq = last_seq - 1
				WHERE topic = ? AND aggregate_type = ? AND aggregate_id = ?`
})

// backs is, for each row, how many rows of the same aggregate follow it
// (counts: the rows of each aggregate): its number is the counter's last
// minus that, the counter ending at the last one's number.
func backs(rows []EmitRow, counts map[aggregateKey]int64) []int64 {
	later := maps.Clone(counts)
	out := make([]int64, len(rows))
	for i, r := range rows {
		k := aggregateKey{r.Topic, r.AggregateType, r.AggregateID}
		later[k]--
		out[i] = later[k]
	}
	return out
}

// aggregateKey is what Emit numbers events by: an aggregate on a topic.
type aggregateKey struct{ topic, typ, id string }

// countByAggregate counts rows by aggregate, and returns the aggregates in
// key order: the order their counters are locked in, so that two
// transactions writing the same aggregates never wait on each other in a
// cycle within a statement.
func countByAggregate(rows []EmitRow) ([]aggregateKey, map[aggregateKey]int64) {
	counts := map[aggregateKey]int64{}
	for _, r := range rows {
		counts[aggregateKey{r.Topic, r.AggregateType, r.AggregateID}]++
	}
	keys := slices.SortedFunc(maps.Keys(counts), func(a, b aggregateKey) int {
		return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.typ, b.typ), cmp.Compare(a.id, b.id))
	})
	return keys, counts
}

// emitExample is two rows of one aggregate and one of another: the
// statements' shapes, for their golden files.
var emitExample = []EmitRow{{Topic: "t", AggregateType: "a", AggregateID: "1"},
	{Topic: "t", AggregateType: "a", AggregateID: "1"}, {Topic: "t", AggregateType: "a", AggregateID: "2"}}

// The emit statements' shapes, each with a golden file.
var (
	_ = emitShape("emit/insert", func(t Tables) Tables { return Tables{Outbox: t.Outbox} })
	_ = emitShape("emit/insert-not-scheduled", func(t Tables) Tables { return Tables{Outbox: t.Outbox, Scheduled: t.Scheduled} })
	_ = emitShape("emit/insert-numbered", func(t Tables) Tables { return Tables{Outbox: t.Outbox, Sequences: t.Sequences} })
	_ = emitShape("emit/insert-numbered-not-scheduled", func(t Tables) Tables {
		return Tables{Outbox: t.Outbox, Sequences: t.Sequences, Scheduled: t.Scheduled}
	})
	_ = scheduleShape("emit/schedule", func(t Tables) Tables { return Tables{Outbox: t.Outbox, Scheduled: t.Scheduled} })
	_ = scheduleShape("emit/schedule-numbered", func(t Tables) Tables {
		return Tables{Outbox: t.Outbox, Sequences: t.Sequences, Scheduled: t.Scheduled}
	})
)

// emitShape defines the statements EmitWrites runs for emitExample on
// the tables of t that tables keeps, in every dialect.
func emitShape(name string, tables func(Tables) Tables) *Statement {
	render := func(t Tables) string {
		u := tables(t)
		u.Dialect = t.Dialect
		return joinWrites(u.EmitWrites(emitExample))
	}
	return define(name, render).also(SQLite, render).also(MySQL, render)
}

// scheduleShape is emitShape for ScheduleWrites.
func scheduleShape(name string, tables func(Tables) Tables) *Statement {
	render := func(t Tables) string {
		u := tables(t)
		u.Dialect = t.Dialect
		return joinWrites(u.ScheduleWrites(emitExample, time.Time{}))
	}
	return define(name, render).also(SQLite, render).also(MySQL, render)
}

// joinWrites is the text of writes, one statement after the other.
func joinWrites(writes []Write) string {
	texts := make([]string, len(writes))
	for i, w := range writes {
		texts[i] = w.SQL
	}
	return strings.Join(texts, ";\n")
}
