package outboxdb

import (
	"context"
	"fmt"
	"time"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// DefaultMaxRows bounds the rows a read of the backlog counts when given
// no bound: a backlog of millions is "at least" this many, read in
// milliseconds, where an exact count would take seconds.
const DefaultMaxRows = 100_000

// Pending is the committed rows of an outbox that no path delivered, among
// the first MaxRows of them in id order.
type Pending struct {
	At     time.Time // the database's time of the read
	Count  int64
	Capped bool      // Count reached the bound: there are at least Count
	Oldest time.Time // when the oldest counted was written; zero for none
	Topics []TopicPending
}

// TopicPending is the pending rows of one topic, among those counted.
type TopicPending struct {
	Topic         string
	Pending       int64
	OldestPending time.Time
}

// ReadPending counts the pending rows of t, by topic, walking at most
// maxRows of them (DefaultMaxRows when not positive) in id order through
// the outbox's partial index of undelivered rows. Ids follow the order of
// the inserts and created_at that of the transactions' starts, so Oldest
// is the oldest of the rows counted, not always of all.
func ReadPending(ctx context.Context, q Querier, t Tables, maxRows int) (Pending, error) {
	if maxRows <= 0 {
		maxRows = DefaultMaxRows
	}
	var (
		p   Pending
		wal bool
	)
	if err := queryRow(ctx, q, `SELECT now(), to_regclass($1) IS NOT NULL`, []any{pgsql.QuoteIdent(t.WALProgress())},
		&p.At, &wal); err != nil {
		return Pending{}, fmt.Errorf("reading the outbox backlog: %w", err)
	}
	var d Delivery
	if wal {
		d.progress = t.WALProgress()
	}
	rows, err := q.QueryContext(ctx, `SELECT topic, count(*), min(created_at) FROM (
			SELECT o.topic, o.created_at FROM `+pgsql.QuoteIdent(t.Outbox)+` o WHERE `+d.Pending("o")+`
			ORDER BY o.id LIMIT $1) o
		GROUP BY topic ORDER BY topic`, maxRows)
	if err != nil {
		return Pending{}, fmt.Errorf("reading the outbox backlog: %w", err)
	}
	defer rows.Close()
	p.Topics = []TopicPending{}
	for rows.Next() {
		var tp TopicPending
		if err := rows.Scan(&tp.Topic, &tp.Pending, &tp.OldestPending); err != nil {
			return Pending{}, fmt.Errorf("reading the outbox backlog: %w", err)
		}
		p.Topics = append(p.Topics, tp)
		p.Count += tp.Pending
		if p.Oldest.IsZero() || tp.OldestPending.Before(p.Oldest) {
			p.Oldest = tp.OldestPending
		}
	}
	if err := rows.Err(); err != nil {
		return Pending{}, fmt.Errorf("reading the outbox backlog: %w", err)
	}
	p.Capped = p.Count >= int64(maxRows)
	return p, nil
}

// OpenDeadLetters counts the dead letters neither retried nor discarded,
// those the relay wrote and those the consumers wrote, each up to a bound.
type OpenDeadLetters struct {
	Relay, Consumer int64
}

// ReadOpenDeadLetters counts the open dead letters of t, at most maxRows
// (DefaultMaxRows when not positive) of each source, through the
// (source, created_at) index. A dead-letter table of an earlier version
// has no columns for what an operator did: all its letters are open.
func ReadOpenDeadLetters(ctx context.Context, q Querier, t Tables, maxRows int) (OpenDeadLetters, error) {
	if maxRows <= 0 {
		maxRows = DefaultMaxRows
	}
	settled, err := ColumnExists(ctx, q, t.DeadLetters, "discarded_at")
	if err != nil {
		return OpenDeadLetters{}, fmt.Errorf("reading the dead-letter table: %w", err)
	}
	open := ""
	if settled {
		open = " AND discarded_at IS NULL AND retried_at IS NULL"
	}
	dl := pgsql.QuoteIdent(t.DeadLetters)
	var n OpenDeadLetters
	err = queryRow(ctx, q, `SELECT
		(SELECT count(*) FROM (SELECT 1 FROM `+dl+` WHERE source = 'relay'`+open+` LIMIT $1) r),
		(SELECT count(*) FROM (SELECT 1 FROM `+dl+` WHERE source <> 'relay'`+open+` LIMIT $1) c)`,
		[]any{maxRows}, &n.Relay, &n.Consumer)
	if err != nil {
		return OpenDeadLetters{}, fmt.Errorf("counting dead letters: %w", err)
	}
	return n, nil
}
