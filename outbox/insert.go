package outbox

import (
	"cmp"
	"context"
	stdsql "database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"entgo.io/ent/dialect"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// NotifyChannel is the LISTEN/NOTIFY channel of an outbox table. Emit
// notifies it in the emitting transaction, so the wake-up is sent when,
// and only if, the transaction commits; the fast relay listens on it.
func NotifyChannel(table string) string { return table }

// insertColumns is how many parameters a row takes.
const insertColumns = 10

// InsertQuery builds the INSERT of rows into table, in their order, as
// Emit writes them (the compatible relay path's schema adapter uses it
// too). A row whose event id is already present is skipped (ON CONFLICT
// DO NOTHING), so that a duplicate does not abort the caller's
// transaction; the statement returns one row per row inserted, and
// notifies NotifyChannel(table) once per row at commit. Rows keep the
// aggregate_seq they carry (Row.AggregateSeq; NULL for 0): it numbers
// none (see InsertNumberedQuery).
func InsertQuery(table string, rows []Row) (string, []any, error) {
	return insertQuery(table, "", rows)
}

// insertQuery is InsertQuery that also skips a row whose event id is
// waiting in scheduledTable ("" for none).
func insertQuery(table, scheduledTable string, rows []Row) (string, []any, error) {
	var (
		q    strings.Builder
		args = make([]any, 0, insertColumns*len(rows))
	)
	q.WriteString("WITH inserted AS (INSERT INTO " + pgsql.QuoteIdent(table) +
		" (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers, readable_from, aggregate_seq) ")
	cell := "($%d,$%d,$%d,$%d,$%d,$%d,$%d::jsonb,$%d::jsonb,$%d::bigint,$%d::bigint)"
	if scheduledTable == "" {
		q.WriteString("VALUES ")
	} else {
		// Typed: the VALUES are read by a SELECT, not by the INSERT.
		cell = "($%d::uuid,$%d::text,$%d::int,$%d::text,$%d::text,$%d::text,$%d::jsonb,$%d::jsonb,$%d::int,$%d::bigint)"
		q.WriteString("SELECT * FROM (VALUES ")
	}
	for i, r := range rows {
		headers, err := encodeHeaders(r.Headers)
		if err != nil {
			return "", nil, fmt.Errorf("outbox: event %s: %w", r.EventID, err)
		}
		if i > 0 {
			q.WriteByte(',')
		}
		n := i * insertColumns
		fmt.Fprintf(&q, cell, n+1, n+2, n+3, n+4, n+5, n+6, n+7, n+8, n+9, n+10)
		var seq any
		if r.AggregateSeq > 0 {
			seq = r.AggregateSeq
		}
		args = append(args, r.EventID.String(), r.Name, r.Version, r.Topic, r.AggregateType, r.AggregateID,
			string(r.Payload), headers, readableFromColumn(r.Event), seq)
	}
	if scheduledTable != "" {
		q.WriteString(") AS v (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers," +
			" readable_from, aggregate_seq) WHERE " + notScheduled(scheduledTable))
	}
	// One statement: the insert, and a notification the fast relay gets
	// at commit. It returns one row per inserted row, so the rows affected
	// still tell a duplicate apart.
	q.WriteString(" ON CONFLICT (event_id) DO NOTHING RETURNING 1) SELECT pg_notify(" +
		pgsql.QuoteLiteral(NotifyChannel(table)) + ", '') FROM inserted")
	return q.String(), args, nil
}

// aggregateKey is what Emit numbers events by: an aggregate on a topic.
type aggregateKey struct{ topic, typ, id string }

// InsertNumberedQuery is InsertQuery that also numbers each row in its
// aggregate's order on its topic (aggregate_seq), taking the numbers from
// the counters in seqTable (schema.AggregateSequence) in the same
// statement. The counter rows stay locked until the transaction ends: the
// aggregate's other writers wait, so the numbers have no gaps (a rolled
// back transaction gives its numbers back) and follow commit order. The
// counters are taken in key order, so that two transactions writing the
// same aggregates never wait on each other in a cycle within a statement.
// Rows are inserted in their order, after the numbers are taken, so an
// aggregate's ids follow its numbers too.
func InsertNumberedQuery(table, seqTable string, rows []Row) (string, []any, error) {
	return insertNumberedQuery(table, seqTable, "", rows)
}

// notScheduled is the condition that the row v's event id is not waiting
// in scheduledTable: an id is one event, sent now or later, never both.
func notScheduled(scheduledTable string) string {
	return "NOT EXISTS (SELECT 1 FROM " + pgsql.QuoteIdent(scheduledTable) + " s WHERE s.event_id = v.event_id)"
}

// insertNumberedQuery is InsertNumberedQuery that also skips a row whose
// event id is waiting in scheduledTable ("" for none).
func insertNumberedQuery(table, seqTable, scheduledTable string, rows []Row) (string, []any, error) {
	keys, counts := countByAggregate(rows)
	const rowColumns = 11
	var (
		q    strings.Builder
		args = make([]any, 0, 4*len(keys)+rowColumns*len(rows))
	)
	seqs := pgsql.QuoteIdent(seqTable)
	q.WriteString("WITH numbered AS (INSERT INTO " + seqs + " AS s (topic, aggregate_type, aggregate_id, last_seq) VALUES ")
	for i, k := range keys {
		if i > 0 {
			q.WriteByte(',')
		}
		fmt.Fprintf(&q, "($%d::text,$%d::text,$%d::text,$%d::bigint)", len(args)+1, len(args)+2, len(args)+3, len(args)+4)
		args = append(args, k.topic, k.typ, k.id, counts[k])
	}
	q.WriteString(" ON CONFLICT (topic, aggregate_type, aggregate_id) DO UPDATE SET last_seq = s.last_seq + EXCLUDED.last_seq" +
		" RETURNING topic, aggregate_type, aggregate_id, last_seq), inserted AS (INSERT INTO " + pgsql.QuoteIdent(table) +
		" (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers, readable_from, aggregate_seq)" +
		" SELECT v.event_id, v.event_name, v.event_version, v.topic, v.aggregate_type, v.aggregate_id, v.payload, v.headers," +
		" v.readable_from, n.last_seq - v.back FROM (VALUES ")
	// back is how many rows of the same aggregate follow the row here:
	// the counter ends at the last one's number.
	later := maps.Clone(counts)
	for i, r := range rows {
		headers, err := encodeHeaders(r.Headers)
		if err != nil {
			return "", nil, fmt.Errorf("outbox: event %s: %w", r.EventID, err)
		}
		k := aggregateKey{r.Topic, r.AggregateType, r.AggregateID}
		later[k]--
		if i > 0 {
			q.WriteByte(',')
		}
		n := len(args)
		fmt.Fprintf(&q, "($%d::uuid,$%d::text,$%d::int,$%d::text,$%d::text,$%d::text,$%d::jsonb,$%d::jsonb,$%d::int,$%d::bigint,$%d::int)",
			n+1, n+2, n+3, n+4, n+5, n+6, n+7, n+8, n+9, n+10, n+11)
		args = append(args, r.EventID.String(), r.Name, r.Version, r.Topic, r.AggregateType, r.AggregateID,
			string(r.Payload), headers, readableFromColumn(r.Event), later[k], i)
	}
	q.WriteString(") AS v (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers," +
		" readable_from, back, ord) JOIN numbered n USING (topic, aggregate_type, aggregate_id)")
	if scheduledTable != "" {
		q.WriteString(" WHERE " + notScheduled(scheduledTable))
	}
	q.WriteString(" ORDER BY v.ord" +
		" ON CONFLICT (event_id) DO NOTHING RETURNING 1) SELECT pg_notify(" +
		pgsql.QuoteLiteral(NotifyChannel(table)) + ", '') FROM inserted")
	return q.String(), args, nil
}

// insert writes rows in one statement. A row whose event id is already in
// the outbox, or waiting in scheduledTable ("" for none), fails it with
// events.ErrDuplicateEventID, the transaction still usable.
func insert(ctx context.Context, drv dialect.ExecQuerier, table, seqTable, scheduledTable string, rows []Row) error {
	query, args, err := insertQuery(table, scheduledTable, rows)
	if seqTable != "" {
		query, args, err = insertNumberedQuery(table, seqTable, scheduledTable, rows)
	}
	if err != nil {
		return err
	}
	n, err := execWrite(ctx, drv, query, args, "writing", rows)
	if err != nil || n == len(rows) {
		return err
	}
	if len(rows) == 1 {
		if seqTable != "" {
			// The transaction goes on: give back the number the duplicate
			// took (the counter is still locked by it).
			r := rows[0]
			var res stdsql.Result
			if err := drv.Exec(ctx, `UPDATE `+pgsql.QuoteIdent(seqTable)+` SET last_seq = last_seq - 1
				WHERE topic = $1 AND aggregate_type = $2 AND aggregate_id = $3`,
				[]any{r.Topic, r.AggregateType, r.AggregateID}, &res); err != nil {
				return fmt.Errorf("outbox: giving back the number of duplicate event %s: %w", r.EventID, err)
			}
		}
		return fmt.Errorf("%w: %s (%q)", events.ErrDuplicateEventID, rows[0].EventID, rows[0].Name)
	}
	return fmt.Errorf("%w: %d of %d events were already in the outbox or scheduled", events.ErrDuplicateEventID, len(rows)-n, len(rows))
}

// execWrite runs query, a write of rows that returns one row per row
// written, and returns how many it wrote; doing ("writing", "scheduling")
// names the write in its errors.
func execWrite(ctx context.Context, drv dialect.ExecQuerier, query string, args []any, doing string, rows []Row) (int, error) {
	var res stdsql.Result
	if err := drv.Exec(ctx, query, args, &res); err != nil {
		if len(rows) == 1 {
			return 0, fmt.Errorf("outbox: %s %q event %s: %w", doing, rows[0].Name, rows[0].EventID, err)
		}
		return 0, fmt.Errorf("outbox: %s %d events: %w", doing, len(rows), err)
	}
	if res == nil {
		return 0, errors.New("outbox: the driver returned no result")
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("outbox: counting the rows written: %w", err)
	}
	return int(n), nil
}

// countByAggregate counts rows by aggregate, and returns the aggregates in
// key order: the order their counters are locked in, so that two
// transactions writing the same aggregates never wait on each other in a
// cycle within a statement.
func countByAggregate(rows []Row) ([]aggregateKey, map[aggregateKey]int64) {
	counts := map[aggregateKey]int64{}
	for _, r := range rows {
		counts[aggregateKey{r.Topic, r.AggregateType, r.AggregateID}]++
	}
	keys := slices.SortedFunc(maps.Keys(counts), func(a, b aggregateKey) int {
		return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.typ, b.typ), cmp.Compare(a.id, b.id))
	})
	return keys, counts
}
