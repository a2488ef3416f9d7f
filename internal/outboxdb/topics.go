package outboxdb

import (
	"context"
	"fmt"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// RecentTopics returns the destination topics of the last rows rows
// written to the outbox, in name order: what a relay publishes to, as far
// as the table tells at a glance (along the primary key, however large
// the table).
func (t Tables) RecentTopics(ctx context.Context, q Querier, rows int) ([]string, error) {
	rs, err := t.bound(q).QueryContext(ctx, recentTopics.SQL(t), rows)
	if err != nil {
		return nil, fmt.Errorf("reading the recent topics of %q: %w", t.Outbox, err)
	}
	defer rs.Close()
	var topics []string
	for rs.Next() {
		var topic string
		if err := rs.Scan(&topic); err != nil {
			return nil, fmt.Errorf("reading the recent topics of %q: %w", t.Outbox, err)
		}
		topics = append(topics, topic)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("reading the recent topics of %q: %w", t.Outbox, err)
	}
	return topics, nil
}

// recentTopics reads the topics of the last $1 rows, in name order.
var recentTopics = define("topics/recent", func(t Tables) string {
	return `SELECT DISTINCT topic FROM (SELECT topic FROM ` + pgsql.QuoteIdent(t.Outbox) +
		` ORDER BY id DESC LIMIT $1) recent ORDER BY topic`
}).also(SQLite, func(t Tables) string {
	return `SELECT DISTINCT topic FROM (SELECT topic FROM ` + pgsql.QuoteIdent(t.Outbox) +
		` ORDER BY id DESC LIMIT ?1) recent ORDER BY topic`
})
