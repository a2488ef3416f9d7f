package outboxdb

import (
	"context"
	"fmt"
	"time"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// Held is the aggregates one consumer holds behind a dead letter: their
// later events wait until the letter is retried.
type Held struct {
	Consumer string
	Count    int64
	Oldest   []HeldAggregate // the longest held first
}

// HeldAggregate is one aggregate held behind the dead letter of its event
// EventID, number Seq in the aggregate's order on Topic.
type HeldAggregate struct {
	Topic, AggregateType, AggregateID string
	Seq                               int64
	EventID                           string
	Since                             time.Time
}

// ReadHeld reads, per consumer, how many aggregates it holds and the
// maxListed it has held longest, through the positions table's partial
// index of held rows; none when there is no positions table.
func ReadHeld(ctx context.Context, q Querier, t Tables, maxListed int) ([]Held, error) {
	held := []Held{}
	exists, err := t.TableExists(ctx, q, t.Positions)
	if err != nil || !exists {
		return held, err
	}
	rows, err := t.bound(q).QueryContext(ctx, heldRead.SQL(t), maxListed)
	if err != nil {
		return nil, fmt.Errorf("reading held aggregates: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			consumer string
			n        int64
			a        HeldAggregate
		)
		if err := rows.Scan(&consumer, &n, &a.Topic, &a.AggregateType, &a.AggregateID, &a.Seq, &a.EventID, &a.Since); err != nil {
			return nil, fmt.Errorf("reading held aggregates: %w", err)
		}
		if len(held) == 0 || held[len(held)-1].Consumer != consumer {
			held = append(held, Held{Consumer: consumer, Count: n, Oldest: []HeldAggregate{}})
		}
		last := &held[len(held)-1]
		last.Oldest = append(last.Oldest, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading held aggregates: %w", err)
	}
	return held, nil
}

// heldRead reads per consumer the count of the aggregates it holds and
// the $1 it has held longest.
var heldRead = define("consumers/held", func(t Tables) string {
	p := pgsql.QuoteIdent(t.Positions)
	return `SELECT c.consumer, c.n, h.topic, h.aggregate_type, h.aggregate_id, h.held_seq,
			coalesce(h.held_event_id::text, ''), coalesce(h.held_at, h.updated_at)
		FROM (SELECT consumer, count(*) AS n FROM ` + p + ` WHERE held_seq IS NOT NULL GROUP BY consumer) c
		CROSS JOIN LATERAL (SELECT * FROM ` + p + ` p WHERE p.consumer = c.consumer AND p.held_seq IS NOT NULL
			ORDER BY coalesce(p.held_at, p.updated_at), p.id LIMIT $1) h
		ORDER BY c.consumer, coalesce(h.held_at, h.updated_at), h.id`
})
