package outboxdb

import "github.com/entoutbox/entoutbox/internal/pgsql"

// The reads of the consumers' lag (internal/lag), in one repeatable-read
// snapshot.

// LagTables reads the database's time, and whether the sequences' ($1)
// and the positions' ($2) tables exist (quoted names).
var LagTables = define("lag/tables", func(Tables) string {
	return `SELECT now(), to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL`
})

// LagCount reads, per consumer and topic, the events behind: the sum of
// the topic's counters less the sum of the consumer's positions (two
// sequential scans, no join).
var LagCount = define("lag/count", func(t Tables) string {
	return `WITH numbered AS (
			SELECT topic, sum(last_seq) AS n FROM ` + pgsql.QuoteIdent(t.Sequences) + ` GROUP BY topic
		), applied AS (
			SELECT consumer, topic, sum(last_seq) AS n FROM ` + pgsql.QuoteIdent(t.Positions) + ` GROUP BY consumer, topic
		)
		SELECT a.consumer, a.topic, greatest(s.n - a.n, 0)::bigint
		FROM applied a JOIN numbered s USING (topic) ORDER BY a.consumer, a.topic`
})

// LagWalkBounds reads the lowest id and the count of the outbox's $2 rows
// below id $1: the next chunk of a walk from the newest row back.
var LagWalkBounds = define("lag/walk-bounds", func(t Tables) string {
	return `SELECT coalesce(min(id), 0), count(*) FROM (SELECT id FROM ` + pgsql.QuoteIdent(t.Outbox) + ` WHERE id < $1 ORDER BY id DESC LIMIT $2) w`
})

// LagLocate counts, per consumer ($3) and topic ($4), the rows of ids
// [$1, $2) behind the consumer's position, and the oldest one's time,
// probing the positions' unique key once per row.
var LagLocate = define("lag/locate", func(t Tables) string {
	return `SELECT c.consumer, c.topic, count(*), min(o.created_at)
		FROM ` + pgsql.QuoteIdent(t.Outbox) + ` o JOIN unnest($3::text[], $4::text[]) AS c(consumer, topic) ON c.topic = o.topic
		WHERE o.id >= $1 AND o.id < $2 AND o.aggregate_seq > coalesce((SELECT p.last_seq FROM ` + pgsql.QuoteIdent(t.Positions) + ` p
			WHERE p.consumer = c.consumer AND p.topic = o.topic AND p.aggregate_type = o.aggregate_type
			AND p.aggregate_id = o.aggregate_id), 0)
		GROUP BY c.consumer, c.topic`
})
