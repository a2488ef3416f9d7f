package outboxdb

import (
	"strconv"
	"strings"
	"time"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// EventFilter is the conditions of a search of the outbox's rows, in the
// order they are added (the console plans which, from the indexes there
// are); its zero value selects every row.
type EventFilter struct {
	conds []string
	args  []any
}

func (f *EventFilter) add(cond string, v any) {
	f.args = append(f.args, v)
	f.conds = append(f.conds, cond+" $"+strconv.Itoa(len(f.args)))
}

// CreatedFrom keeps the rows written at or after at.
func (f *EventFilter) CreatedFrom(at time.Time) { f.add("created_at >=", at) }

// CreatedBefore keeps the rows written before at.
func (f *EventFilter) CreatedBefore(at time.Time) { f.add("created_at <", at) }

// AggregateType keeps the rows of aggregate type typ.
func (f *EventFilter) AggregateType(typ string) { f.add("aggregate_type =", typ) }

// AggregateTypeIn keeps the rows of any of types: the index on
// (aggregate_type, aggregate_id) is then read once per type.
func (f *EventFilter) AggregateTypeIn(types []string) {
	f.args = append(f.args, types)
	f.conds = append(f.conds, "aggregate_type = ANY($"+strconv.Itoa(len(f.args))+")")
}

// AggregateID keeps the rows of aggregate id.
func (f *EventFilter) AggregateID(id string) { f.add("aggregate_id =", id) }

// EventName keeps the rows of the event name.
func (f *EventFilter) EventName(name string) { f.add("event_name =", name) }

// Topic keeps the rows of topic.
func (f *EventFilter) Topic(topic string) { f.add("topic =", topic) }

// IDFrom keeps the rows of id at least id.
func (f *EventFilter) IDFrom(id int64) { f.add("id >=", id) }

// IDBelow keeps the rows of id below id.
func (f *EventFilter) IDBelow(id int64) { f.add("id <", id) }

// SearchEvents reads up to limit rows of the outbox f selects (id,
// event_id, event_name, event_version, topic, aggregate_type,
// aggregate_id, created_at, delivered_at, delivered by any path,
// attempts, last_error or ""), newest first, or oldest first when
// ascending.
func (t Tables) SearchEvents(d Delivery, f EventFilter, ascending bool, limit int) (string, []any) {
	q := `SELECT id, event_id, event_name, event_version, topic, aggregate_type, aggregate_id, created_at,
		delivered_at, ` + d.Delivered("o") + `, attempts, coalesce(last_error, '') FROM ` + pgsql.QuoteIdent(t.Outbox) + ` o`
	if len(f.conds) > 0 {
		q += " WHERE " + strings.Join(f.conds, " AND ")
	}
	order := " ORDER BY id DESC"
	if ascending {
		order = " ORDER BY id"
	}
	return q + order + " LIMIT " + strconv.Itoa(limit), f.args
}

// The search's shapes, each with a golden file.
var (
	_ = define("console/search-events", func(t Tables) string {
		q, _ := t.SearchEvents(Delivery{}, EventFilter{}, false, 51)
		return q
	})
	_ = define("console/search-events-filtered", func(t Tables) string {
		var f EventFilter
		f.CreatedFrom(time.Time{})
		f.CreatedBefore(time.Time{})
		f.AggregateTypeIn(nil)
		f.AggregateID("")
		f.EventName("")
		f.Topic("")
		f.IDFrom(0)
		f.IDBelow(0)
		q, _ := t.SearchEvents(Delivery{progress: t.WALProgress()}, f, true, 51)
		return q
	})
)

// ConsoleNewestID reads one past the outbox's highest id (1 when empty):
// where a bounded scan walking down starts.
var ConsoleNewestID = define("console/newest-id", func(t Tables) string {
	return `SELECT coalesce(max(id), 0) + 1 FROM ` + pgsql.QuoteIdent(t.Outbox)
})

// ConsoleIDRange reads the outbox's lowest and highest ids, NULL when it
// is empty.
var ConsoleIDRange = define("console/id-range", func(t Tables) string {
	return `SELECT min(id), max(id) FROM ` + pgsql.QuoteIdent(t.Outbox)
})

// ConsoleFirstIDFrom reads the first row of id $1 or above (id,
// created_at): a probe of a binary search on the primary key.
var ConsoleFirstIDFrom = define("console/first-id-from", func(t Tables) string {
	return `SELECT id, created_at FROM ` + pgsql.QuoteIdent(t.Outbox) + ` WHERE id >= $1 ORDER BY id LIMIT 1`
})

// ConsoleOutboxIndexes lists the valid, non-partial indexes of the table
// $1 (a quoted name) with their columns, comma-separated, in order.
var ConsoleOutboxIndexes = define("console/outbox-indexes", func(Tables) string {
	return `SELECT i.relname, array_to_string(array_agg(a.attname ORDER BY k.ord), ',')
		FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
		CROSS JOIN LATERAL unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum
		WHERE x.indrelid = to_regclass($1) AND x.indisvalid AND x.indpred IS NULL
		GROUP BY i.relname ORDER BY i.relname`
})

// ConsoleAggregateTypes lists the aggregate types by a loose scan of the
// index on (aggregate_type, aggregate_id): one probe per type.
var ConsoleAggregateTypes = define("console/aggregate-types", func(t Tables) string {
	o := pgsql.QuoteIdent(t.Outbox)
	return `WITH RECURSIVE ` + looseScan("types", "aggregate_type", o, "o") + ` SELECT aggregate_type FROM types WHERE aggregate_type IS NOT NULL`
})

// ConsoleAggregateIndex is the index the console advises for a search by
// aggregate over all history.
var ConsoleAggregateIndex = define("console/aggregate-index", func(t Tables) string {
	return `CREATE INDEX CONCURRENTLY ` + pgsql.QuoteIdent(t.Outbox+"_aggregate") + ` ON ` + pgsql.QuoteIdent(t.Outbox) +
		` (aggregate_type, aggregate_id)`
})
