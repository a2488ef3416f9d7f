package outboxdb

import (
	"context"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// heldCounts counts the aggregates each consumer holds behind a dead
// letter, at most $1 of them, through the positions' partial index of
// held ones.
var heldCounts = define("metrics/held-counts", func(t Tables) string {
	return `SELECT consumer, count(*) FROM (SELECT consumer FROM ` + pgsql.QuoteIdent(t.Positions) +
		` WHERE held_seq IS NOT NULL LIMIT $1) h GROUP BY consumer`
})

// CountHeld counts the aggregates each consumer holds behind a dead
// letter, at most maxCount of them in all, by consumer; the positions
// table must exist (TableExists).
func CountHeld(ctx context.Context, q Querier, t Tables, maxCount int) (map[string]int64, error) {
	rows, err := t.bound(q).QueryContext(ctx, heldCounts.SQL(t), maxCount)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	held := map[string]int64{}
	for rows.Next() {
		var consumer string
		var n int64
		if err := rows.Scan(&consumer, &n); err != nil {
			return nil, err
		}
		held[consumer] = n
	}
	return held, rows.Err()
}
