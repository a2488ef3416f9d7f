package outboxdb

import "github.com/entoutbox/entoutbox/internal/pgsql"

// The console's reads of the outbox's tables (package console): each
// bounded, through an index named in its comment.

// looseScan is the recursive CTE cte of the distinct values of column in
// table, one index probe per value (a loose index scan, which PostgreSQL
// does not plan by itself); alias names the table in the probe.
func looseScan(cte, column, table, alias string) string {
	c := alias + "." + column
	return cte + ` AS (
			(SELECT ` + column + ` FROM ` + table + ` ORDER BY ` + column + ` LIMIT 1)
			UNION ALL
			SELECT (SELECT ` + c + ` FROM ` + table + ` ` + alias + ` WHERE ` + c + ` > ` + cte + "." + column + ` ORDER BY ` + c + ` LIMIT 1)
			FROM ` + cte + ` WHERE ` + cte + "." + column + ` IS NOT NULL
		)`
}

// ConsoleProcessedBy reads who processed event $1 (consumer, processed_at,
// attempts), probing the (consumer, event_id) index once per consumer, the
// names found by a loose scan of the same index.
var ConsoleProcessedBy = define("console/processed-by", func(t Tables) string {
	processed := pgsql.QuoteIdent(t.Processed)
	return `WITH RECURSIVE ` + looseScan("names", "consumer", processed, "p") + `
		SELECT consumer, processed_at, attempts FROM ` + processed + `
		WHERE consumer = ANY (ARRAY(SELECT consumer FROM names WHERE consumer IS NOT NULL)) AND event_id = $1
		ORDER BY processed_at`
})

// ConsoleConsumers reads each consumer's name, what it processed in the
// last minute and when it last did: the names by a loose scan of the
// (consumer, event_id) index, the last minute by a range of the
// processed_at index.
var ConsoleConsumers = define("console/consumers", func(t Tables) string {
	processed := pgsql.QuoteIdent(t.Processed)
	return `WITH RECURSIVE ` + looseScan("names", "consumer", processed, "p") + `, recent AS (
			SELECT consumer, count(*) AS n, max(processed_at) AS last FROM ` + processed + `
			WHERE processed_at > now() - interval '1 minute' GROUP BY consumer
		)
		SELECT names.consumer, coalesce(recent.n, 0), recent.last FROM names LEFT JOIN recent USING (consumer)
		WHERE names.consumer IS NOT NULL ORDER BY names.consumer LIMIT 1000`
})

// ConsoleMaxID reads the outbox's highest id, NULL when it is empty.
var ConsoleMaxID = define("console/max-id", func(t Tables) string {
	return `SELECT max(id) FROM ` + pgsql.QuoteIdent(t.Outbox)
})

// ConsoleDeliveryRate counts the rows of ids [$1, $2] ($3 is 1: a range of
// the primary key) delivered in the last $5 seconds, by bucket of $4
// seconds back from now.
var ConsoleDeliveryRate = define("console/delivery-rate", func(t Tables) string {
	return `SELECT floor(extract(epoch FROM (now() - delivered_at)) / $4)::int AS b, count(*)
		FROM ` + pgsql.QuoteIdent(t.Outbox) + ` WHERE id BETWEEN $1 AND $2 AND $3::bigint = 1
			AND delivered_at > now() - make_interval(secs => $5)
		GROUP BY 1`
})

// ConsoleDeliveryRateSampled is ConsoleDeliveryRate reading every $3-th
// id of [$1, $2]: a primary-key lookup each (the LIMIT keeps the planner
// from turning the lookups into a join over the whole table).
var ConsoleDeliveryRateSampled = define("console/delivery-rate-sampled", func(t Tables) string {
	return `SELECT floor(extract(epoch FROM (now() - o.delivered_at)) / $4)::int AS b, count(*)
		FROM generate_series($1::bigint, $2::bigint, $3::bigint) AS s(id)
		CROSS JOIN LATERAL (SELECT delivered_at FROM ` + pgsql.QuoteIdent(t.Outbox) + ` WHERE id = s.id LIMIT 1) o
		WHERE o.delivered_at > now() - make_interval(secs => $5)
		GROUP BY 1`
})
