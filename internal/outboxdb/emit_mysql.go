package outboxdb

import (
	"strings"
)

// Emit on MySQL (MySQL 8, MariaDB 10.6+), which has no INSERT inside a
// WITH, no ON CONFLICT and no NOTIFY. As on SQLite, the counters move
// first, by as many numbers as each aggregate has rows, and the insert
// then reads them: the upsert leaves each counter row locked by the
// transaction until it ends (InnoDB's record lock), so the aggregate's
// other writers wait on it and the numbers have no gaps and follow commit
// order. The counters are written in key order, so that two transactions
// writing the same aggregates never wait on each other in a cycle within
// a statement. A duplicate event id is skipped by a no-op update (the
// rows affected count only the rows inserted); INSERT IGNORE would turn
// every other error into a warning too.

// mysqlCount moves the counters of rows' aggregates on by their rows,
// creating those that are new.
func (t Tables) mysqlCount(rows []EmitRow) Write {
	keys, counts := countByAggregate(rows)
	var (
		q    strings.Builder
		args = make([]any, 0, 4*len(keys))
	)
	q.WriteString("INSERT INTO " + MySQL.quote(t.Sequences) + " (topic, aggregate_type, aggregate_id, last_seq) VALUES ")
	for i, k := range keys {
		if i > 0 {
			q.WriteByte(',')
		}
		q.WriteString("(?,?,?,?)")
		args = append(args, k.topic, k.typ, k.id, counts[k])
	}
	q.WriteString(" ON DUPLICATE KEY UPDATE last_seq = last_seq + VALUES(last_seq)")
	return Write{q.String(), args}
}

// mysqlRows is rows as a derived table v of the columns cols, one SELECT
// per row (MySQL 8 and MariaDB spell a VALUES table differently), with
// each row's values from values.
func mysqlRows(q *strings.Builder, args []any, rows []EmitRow, cols []string, values func(i int, r EmitRow) []any) []any {
	q.WriteString("(")
	for i, r := range rows {
		if i > 0 {
			q.WriteString(" UNION ALL ")
		}
		q.WriteString("SELECT ")
		for j, c := range cols {
			if j > 0 {
				q.WriteByte(',')
			}
			q.WriteByte('?')
			if i == 0 {
				q.WriteString(" AS " + c)
			}
		}
		args = append(args, values(i, r)...)
	}
	q.WriteString(") v")
	return args
}

// mysqlInsert inserts rows in their order, each numbered by seq (an
// expression on v, a row), skipping an event id already in the outbox or
// waiting in t.Scheduled.
func (t Tables) mysqlInsert(rows []EmitRow, seq string) Write {
	const rowColumns = 12
	var q strings.Builder
	args := make([]any, 0, rowColumns*len(rows))
	outbox := MySQL.quote(t.Outbox)
	q.WriteString("INSERT INTO " + outbox +
		" (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers, readable_from, aggregate_seq)" +
		" SELECT v.event_id, v.event_name, v.event_version, v.topic, v.aggregate_type, v.aggregate_id, v.payload, v.headers," +
		" v.readable_from, " + seq + " FROM ")
	_, counts := countByAggregate(rows)
	back := backs(rows, counts)
	args = mysqlRows(&q, args, rows, []string{"event_id", "event_name", "event_version", "topic", "aggregate_type",
		"aggregate_id", "payload", "headers", "readable_from", "seq", "back", "ord"}, func(i int, r EmitRow) []any {
		return []any{r.EventID, r.Name, r.Version, r.Topic, r.AggregateType, r.AggregateID,
			r.Payload, r.Headers, r.ReadableFrom, r.Seq, back[i], i}
	})
	if t.Scheduled != "" {
		q.WriteString(" WHERE NOT EXISTS (SELECT 1 FROM " + MySQL.quote(t.Scheduled) + " s WHERE s.event_id = v.event_id)")
	}
	q.WriteString(" ORDER BY v.ord ON DUPLICATE KEY UPDATE " + outbox + ".id = " + outbox + ".id")
	return Write{q.String(), args}
}

// mysqlSeq is the number of row v: its aggregate's counter, moved on by
// this write, less the rows of the aggregate after it.
func (t Tables) mysqlSeq() string {
	return "(SELECT s.last_seq FROM " + MySQL.quote(t.Sequences) + " s WHERE s.topic = v.topic" +
		" AND s.aggregate_type = v.aggregate_type AND s.aggregate_id = v.aggregate_id) - v.back"
}

// mysqlSchedule schedules rows in their order, each due at its DeliverAt
// or at the database's clock plus DeliverAfter, skipping an event id
// already scheduled or in the outbox. With t.Sequences, the counters of
// the rows' aggregates are locked first (made at 0 when new) without
// taking a number, as on PostgreSQL (EmitSchedule).
func (t Tables) mysqlSchedule(rows []EmitRow) []Write {
	var writes []Write
	if t.Sequences != "" {
		keys, _ := countByAggregate(rows)
		var q strings.Builder
		args := make([]any, 0, 3*len(keys))
		q.WriteString("INSERT INTO " + MySQL.quote(t.Sequences) + " (topic, aggregate_type, aggregate_id, last_seq) VALUES ")
		for i, k := range keys {
			if i > 0 {
				q.WriteByte(',')
			}
			q.WriteString("(?,?,?,0)")
			args = append(args, k.topic, k.typ, k.id)
		}
		q.WriteString(" ON DUPLICATE KEY UPDATE last_seq = last_seq")
		writes = append(writes, Write{q.String(), args})
	}
	const rowColumns = 12
	var q strings.Builder
	args := make([]any, 0, rowColumns*len(rows))
	scheduled := MySQL.quote(t.Scheduled)
	q.WriteString("INSERT INTO " + scheduled + " (event_id, event_name, event_version, topic, aggregate_type, aggregate_id," +
		" payload, headers, readable_from, deliver_at) SELECT v.event_id, v.event_name, v.event_version, v.topic," +
		" v.aggregate_type, v.aggregate_id, v.payload, v.headers, v.readable_from," +
		" COALESCE(v.deliver_at, " + mysqlNow + " + INTERVAL v.deliver_after MICROSECOND) FROM ")
	args = mysqlRows(&q, args, rows, []string{"event_id", "event_name", "event_version", "topic", "aggregate_type",
		"aggregate_id", "payload", "headers", "readable_from", "deliver_at", "deliver_after", "ord"}, func(i int, r EmitRow) []any {
		return []any{r.EventID, r.Name, r.Version, r.Topic, r.AggregateType, r.AggregateID,
			r.Payload, r.Headers, r.ReadableFrom, r.DeliverAt, r.DeliverAfter, i}
	})
	q.WriteString(" WHERE NOT EXISTS (SELECT 1 FROM " + MySQL.quote(t.Outbox) + " o WHERE o.event_id = v.event_id)" +
		" ORDER BY v.ord ON DUPLICATE KEY UPDATE " + scheduled + ".id = " + scheduled + ".id")
	return append(writes, Write{q.String(), args})
}
