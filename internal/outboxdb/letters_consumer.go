package outboxdb

import "github.com/entoutbox/entoutbox/internal/pgsql"

// ConsumerLetterInsert writes a consumer's dead letter into t.DeadLetters
// unless the event ($1, when not NULL) has one of the consumer ($2)
// already: $1 event_id, $2 source, $3 event_name, $4 event_version,
// $5 topic, $6 aggregate_type, $7 aggregate_id, $8 payload, $9 headers,
// $10 reason, $11 attempts, and $12 aggregate_seq when withSeq (tables
// generated before it have no such column). One row affected when it
// wrote.
func (t Tables) ConsumerLetterInsert(withSeq bool) string {
	columns, values := "", ""
	if withSeq {
		columns, values = ", aggregate_seq", ", $12::bigint"
	}
	d := pgsql.QuoteIdent(t.DeadLetters)
	if t.Dialect == SQLite || t.Dialect == MySQL {
		if withSeq {
			values = ", ?12"
		}
		from := "" // MySQL's SELECT takes a WHERE only after a FROM
		if t.Dialect == MySQL {
			d, from = MySQL.quote(t.DeadLetters), " FROM DUAL"
		}
		return `INSERT INTO ` + d + ` (event_id, source, event_name, event_version, topic,
		aggregate_type, aggregate_id, payload, headers, reason, attempts` + columns + `)
		SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11` + values + from + `
		WHERE ?1 IS NULL OR NOT EXISTS (SELECT 1 FROM ` + d + ` WHERE event_id = ?1 AND source = ?2)`
	}
	return `INSERT INTO ` + d + ` (event_id, source, event_name, event_version, topic,
		aggregate_type, aggregate_id, payload, headers, reason, attempts` + columns + `)
		SELECT $1::uuid, $2::text, $3::text, $4::bigint, $5::text, $6::text, $7::text, $8::bytea, $9::jsonb, $10::text, $11::bigint` + values + `
		WHERE $1::uuid IS NULL OR NOT EXISTS (SELECT 1 FROM ` + d + ` WHERE event_id = $1::uuid AND source = $2::text)`
}

// The consumer letter's shapes, each with a golden file.
var (
	_ = define("letters/consumer-insert", func(t Tables) string { return t.ConsumerLetterInsert(false) }).
		also(SQLite, func(t Tables) string { return t.ConsumerLetterInsert(false) }).
		also(MySQL, func(t Tables) string { return t.ConsumerLetterInsert(false) })
	_ = define("letters/consumer-insert-with-seq", func(t Tables) string { return t.ConsumerLetterInsert(true) }).
		also(SQLite, func(t Tables) string { return t.ConsumerLetterInsert(true) }).
		also(MySQL, func(t Tables) string { return t.ConsumerLetterInsert(true) })
)
