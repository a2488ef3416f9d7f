package outboxdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
)

// Emit on MySQL (MySQL 8, MariaDB 10.6+), which has no INSERT inside a
// WITH, no ON CONFLICT, no RETURNING and no NOTIFY, and whose InnoDB locks
// the gaps of an index where a statement searches it, not only the rows it
// finds. The statements are chosen so that Emit takes no gap lock: an
// upsert on the counters' unique key, or an INSERT … SELECT reading the
// counters or another table, would hold next-key locks that make
// transactions writing unrelated aggregates, which sort next to each other
// ("2" lies between "199" and "20"), deadlock. So, ahead of the insert
// (EmitAhead):
//
//   - each aggregate's counter is moved on by an UPDATE on its whole key
//     (a lock on that row alone, held until the transaction ends: the
//     aggregate's other writers wait on it, and the numbers have no gaps
//     and follow commit order), which returns the new value through
//     LAST_INSERT_ID(expr); a counter not there yet is inserted;
//   - the event ids already in the other table (scheduled, or in the
//     outbox) are looked for with a plain read, which locks nothing, as
//     PostgreSQL's NOT EXISTS does.
//
// The insert then writes each row with its number. The counters are moved
// in key order, so that two transactions writing the same aggregates
// never wait on each other in a cycle. A duplicate event id in the outbox
// is skipped by a no-op update (the rows affected count only the rows
// inserted); INSERT IGNORE would turn every other error into a warning
// too.

// EmitAhead does, in drv's transaction, what must come before rows are
// written (EmitWrites) or scheduled (schedule true: ScheduleWrites) on
// MySQL: it numbers the rows (the counters moved on, or for scheduled
// rows locked, made at 0 when new) and refuses, with
// ErrDuplicateInOtherTable, a row whose event id is in the other table.
// Elsewhere it does nothing.
func (t Tables) EmitAhead(ctx context.Context, drv dialect.ExecQuerier, rows []EmitRow, schedule bool) error {
	if t.Dialect != MySQL || len(rows) == 0 {
		return nil
	}
	other := t.Scheduled
	if schedule {
		other = t.Outbox
	}
	keys, counts := countByAggregate(rows)
	exist, err := t.mysqlLook(ctx, drv, other, rows, keys)
	if err != nil {
		return err
	}
	if t.Sequences == "" {
		return nil
	}
	last := make(map[aggregateKey]int64, len(keys))
	for _, k := range keys {
		take := counts[k]
		if schedule {
			take = 0 // locked, as on PostgreSQL, without a number
		}
		n, err := t.mysqlMoveCounter(ctx, drv, k, take, exist[k])
		if err != nil {
			return fmt.Errorf("moving the counter of aggregate %s/%s on %q: %w", k.typ, k.id, k.topic, err)
		}
		last[k] = n
	}
	if schedule {
		return nil
	}
	back := backs(rows, counts)
	for i := range rows {
		rows[i].Seq = last[aggregateKey{rows[i].Topic, rows[i].AggregateType, rows[i].AggregateID}] - back[i]
	}
	return nil
}

// ErrDuplicateInOtherTable is EmitAhead's refusal of a row whose event id
// is scheduled (for an event written now) or in the outbox (for one
// scheduled).
var ErrDuplicateInOtherTable = errors.New("event id already scheduled or in the outbox")

// mysqlLook reads, in one plain read (it locks nothing), which of keys
// have a counter (with t.Sequences), and whether an event id of rows is
// in table other ("" for none): then it refuses rows.
func (t Tables) mysqlLook(ctx context.Context, drv dialect.ExecQuerier, other string, rows []EmitRow, keys []aggregateKey) (map[aggregateKey]bool, error) {
	var (
		parts []string
		args  []any
	)
	if t.Sequences != "" { // first: the union's columns take its types
		var q strings.Builder
		q.WriteString("(" + mysqlCounterRead.SQL(t))
		for i, k := range keys {
			if i > 0 {
				q.WriteString(" OR ")
			}
			q.WriteString("(topic = ? AND aggregate_type = ? AND aggregate_id = ?)")
			args = append(args, k.topic, k.typ, k.id)
		}
		parts = append(parts, q.String()+")")
	}
	if other != "" {
		parts = append(parts, "("+strings.Replace(mysqlFindEvents.SQL(Tables{Dialect: MySQL, Outbox: other}),
			"?", "?"+strings.Repeat(",?", len(rows)-1), 1)+")")
		for _, r := range rows {
			args = append(args, r.EventID)
		}
	}
	if len(parts) == 0 {
		return nil, nil
	}
	var found entsql.Rows
	if err := drv.Query(ctx, strings.Join(parts, " UNION ALL "), args, &found); err != nil {
		return nil, fmt.Errorf("reading the counters and event ids: %w", err)
	}
	defer found.Close()
	exist := make(map[aggregateKey]bool, len(keys))
	for found.Next() {
		var (
			event          bool
			topic, typ, id sql.NullString
		)
		if err := found.Scan(&event, &topic, &typ, &id); err != nil {
			return nil, err
		}
		if event {
			return nil, fmt.Errorf("%w: %s", ErrDuplicateInOtherTable, topic.String)
		}
		exist[aggregateKey{topic.String, typ.String, id.String}] = true
	}
	return exist, found.Close()
}

// mysqlMoveCounter moves k's counter on by take and returns its value, or
// with take 0 locks it alone; exists is whether a plain read found it.
// A counter found is moved (or locked) by its key alone: a lock on its
// row. A locking statement on a key that is not there would lock the gap
// where it would be, so a new counter is inserted instead, by an upsert:
// an insert takes no gap lock, and the upsert, when another transaction
// made the counter at once, waits for it and then moves it (with an
// exclusive lock: a plain insert's duplicate would leave a shared one,
// which two such transactions would then both wait to upgrade).
func (t Tables) mysqlMoveCounter(ctx context.Context, drv dialect.ExecQuerier, k aggregateKey, take int64, exists bool) (int64, error) {
	key := []any{k.topic, k.typ, k.id}
	if exists {
		last, found, err := t.mysqlTakeFound(ctx, drv, key, take)
		if err != nil || found {
			return last, err
		}
	}
	var res sql.Result
	if err := drv.Exec(ctx, mysqlCounterMake.SQL(t), append(key, take), &res); err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil || n != 2 {
		return take, err // made (1), or locked without a number (0)
	}
	return res.LastInsertId() // moved: the value, by LAST_INSERT_ID(expr)
}

// mysqlTakeFound moves the counter of key on by take, or with take 0
// locks it, and returns its value; found is false when it is not there.
func (t Tables) mysqlTakeFound(ctx context.Context, drv dialect.ExecQuerier, key []any, take int64) (last int64, found bool, err error) {
	if take > 0 { // one statement: LAST_INSERT_ID(expr) returns the value
		var res sql.Result
		if err := drv.Exec(ctx, mysqlCounterTake.SQL(t), append([]any{take}, key...), &res); err != nil {
			return 0, false, err
		}
		n, err := res.RowsAffected()
		if err != nil || n == 0 {
			return 0, false, err
		}
		last, err = res.LastInsertId()
		return last, true, err
	}
	var rows entsql.Rows
	if err := drv.Query(ctx, mysqlCounterLock.SQL(t), key, &rows); err != nil {
		return 0, false, err
	}
	defer rows.Close()
	if found = rows.Next(); found {
		if err := rows.Scan(&last); err != nil {
			return 0, false, err
		}
	}
	return last, found, rows.Close()
}

// The statements of EmitAhead, each with a golden file.
var (
	mysqlCounterTake = defineOnly("emit/counter-take", MySQL, func(t Tables) string {
		return `UPDATE ` + MySQL.quote(t.Sequences) + ` SET last_seq = LAST_INSERT_ID(last_seq + ?)
			WHERE topic = ? AND aggregate_type = ? AND aggregate_id = ?`
	})
	mysqlCounterMake = defineOnly("emit/counter-make", MySQL, func(t Tables) string {
		return `INSERT INTO ` + MySQL.quote(t.Sequences) + ` (topic, aggregate_type, aggregate_id, last_seq) VALUES (?, ?, ?, ?)
			ON DUPLICATE KEY UPDATE last_seq = LAST_INSERT_ID(last_seq + VALUES(last_seq))`
	})
	// The counters there (the WHERE is the keys'), before the ids found.
	mysqlCounterRead = defineOnly("emit/counter-read", MySQL, func(t Tables) string {
		return `SELECT 0, topic, aggregate_type, aggregate_id FROM ` + MySQL.quote(t.Sequences) + ` WHERE `
	})
	mysqlCounterLock = defineOnly("emit/counter-lock", MySQL, func(t Tables) string {
		return `SELECT last_seq FROM ` + MySQL.quote(t.Sequences) +
			` WHERE topic = ? AND aggregate_type = ? AND aggregate_id = ? FOR UPDATE`
	})
	// An event id of rows found in t.Outbox (the one ? stands for the
	// list of them), in the columns of the counters read.
	mysqlFindEvents = defineOnly("emit/find-events", MySQL, func(t Tables) string {
		return `SELECT 1, event_id, '', '' FROM ` + MySQL.quote(t.Outbox) + ` WHERE event_id IN (?) LIMIT 1`
	})
)

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
	// The rows scheduled were refused ahead (EmitAhead).
	q.WriteString(" ORDER BY v.ord ON DUPLICATE KEY UPDATE " + outbox + ".id = " + outbox + ".id")
	return Write{q.String(), args}
}

// mysqlSchedule schedules rows in their order, each due at its DeliverAt
// or at the database's clock plus DeliverAfter, skipping an event id
// already scheduled. Their aggregates' counters were locked ahead, and
// the rows in the outbox refused (EmitAhead).
func (t Tables) mysqlSchedule(rows []EmitRow) []Write {
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
	q.WriteString(" ORDER BY v.ord ON DUPLICATE KEY UPDATE " + scheduled + ".id = " + scheduled + ".id")
	return []Write{{q.String(), args}}
}
