package outboxdb

import (
	"context"
	"fmt"
	"time"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// LiveKey is the advisory lock key of fast relay holder expr (an SQL text
// expression) on the outbox table outbox: a relay holds it, on a session of
// its own, for as long as it runs, and the others read it (LiveHeld).
func LiveKey(outbox, expr string) string {
	return "hashtextextended(" + pgsql.QuoteLiteral("entoutbox live "+outbox+" ") + " || " + expr + ", 0)"
}

// LiveHeld is the condition that a session holds the liveness lock of
// holder expr.
func LiveHeld(outbox, expr string) string {
	key := LiveKey(outbox, expr)
	return `EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND l.classid::bigint = ((` + key + `) >> 32) & 4294967295 AND l.objid::bigint = (` + key + `) & 4294967295)`
}

// Share is what one fast relay subscription owns.
type Share struct {
	Relay      string // RelayID/instance/subscription
	Topic      string // "" for a relay of every topic
	Partitions int
	LeaseUntil time.Time
	// Locks tells it runs with a liveness lock, Live that its session
	// holds it, Lapsed that its lease had ended at the time of reading.
	Locks, Live bool
	Lapsed      bool
}

// MaxShares bounds the shares a read lists: one per relay subscription
// and topic, so a few in any real deployment.
const MaxShares = 1000

// ReadShares reads how many partitions the fast relays of t share and who
// owns which (at most MaxShares, by topic and relay); zero and none before
// a fast relay first ran. On MySQL they are the poll relays' shares (of
// every topic; no liveness locks there); on SQLite there are none.
func ReadShares(ctx context.Context, q Querier, t Tables) (partitions int, shares []Share, err error) {
	leases := t.Partitions()
	switch t.Dialect {
	case MySQL:
		leases = t.PollLease() // the poll relays share the outbox there
	case SQLite:
		return 0, nil, nil // one relay at a time
	}
	q = t.bound(q)
	exists, err := t.TableExists(ctx, q, leases)
	if err != nil || !exists {
		return 0, nil, err
	}
	if err := queryRow(ctx, q, relaysPartitions.SQL(t), nil, &partitions); err != nil {
		return 0, nil, fmt.Errorf("reading the relays: %w", err)
	}
	rows, err := q.QueryContext(ctx, relaysShares.SQL(t), MaxShares)
	if err != nil {
		return 0, nil, fmt.Errorf("reading the relays: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var s Share
		if err := rows.Scan(&s.Relay, &s.Topic, &s.Partitions, &s.LeaseUntil, &s.Lapsed, &s.Locks, &s.Live); err != nil {
			return 0, nil, fmt.Errorf("reading the relays: %w", err)
		}
		shares = append(shares, s)
	}
	if err := rows.Err(); err != nil {
		return 0, nil, fmt.Errorf("reading the relays: %w", err)
	}
	return partitions, shares, nil
}

var (
	// relaysPartitions counts the fast relays' partitions.
	relaysPartitions = define("relays/partitions", func(t Tables) string {
		return `SELECT count(DISTINCT partition) FROM ` + pgsql.QuoteIdent(t.Partitions())
	})
	// relaysShares reads each fast relay's share of each topic, up to $1.
	relaysShares = define("relays/shares", func(t Tables) string {
		parts := pgsql.QuoteIdent(t.Partitions())
		return `SELECT p.relay, p.topic, count(*), max(p.until), max(p.until) < now(),
		coalesce(bool_or(m.live_lock), false), ` + LiveHeld(t.Outbox, "p.relay") + `
		FROM ` + parts + ` p LEFT JOIN ` + pgsql.QuoteIdent(t.Relays()) + ` m ON m.topic = p.topic AND m.relay = p.relay
		WHERE p.relay <> '' GROUP BY p.relay, p.topic ORDER BY p.topic, p.relay LIMIT $1`
	})
)
