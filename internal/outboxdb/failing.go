package outboxdb

import (
	"context"
	"fmt"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// PartitionOf is the fast path's partition of outbox row alias, of
// partitions (an SQL integer expression): the same for every row of an
// aggregate, and the same on every relay since PostgreSQL computes it.
func PartitionOf(alias, partitions string) string {
	return "abs(hashtext(" + alias + ".aggregate_type || ':' || " + alias + ".aggregate_id) % " + partitions + ")::int"
}

// Failing is the pending rows whose last delivery failed, among the first
// maxRows pending in id order: the fast path records each failed publish
// on its row (attempts, available_at, last_error), and a row it delivers
// is no longer pending, so a pending row with last_error set is one whose
// last try failed. (The WAL path keeps its failed rows in memory and
// records nothing on them.)
type Failing struct {
	Topics []FailingRows // by topic
	Relays []FailingRows // by fast relay and topic (its share's)
}

// FailingRows is the failing rows of a topic, or of the partitions a fast
// relay holds on a topic ("" for every topic).
type FailingRows struct {
	Relay, Topic string
	Rows         int64
	// Error is the most frequent of their errors (told apart by their
	// ReasonPattern), as one of them carries it, and ErrorRows how many
	// share it.
	Error     string
	ErrorRows int64
}

// ReadFailing reads the failing rows of t by topic and by fast relay,
// walking at most maxRows pending rows (DefaultMaxRows when not positive)
// as ReadPending does. A row counts for the relay holding its partition
// in the partitions table, on its topic's partitions or those of every
// topic.
func ReadFailing(ctx context.Context, q Querier, t Tables, maxRows int) (Failing, error) {
	if maxRows <= 0 {
		maxRows = DefaultMaxRows
	}
	f := Failing{Topics: []FailingRows{}, Relays: []FailingRows{}}
	d, err := t.ReadDelivery(ctx, q)
	if err != nil {
		return f, err
	}
	var parts bool // the relays' leases: the fast relays', or the poll relays' on MySQL
	switch t.Dialect {
	case Postgres:
		parts, err = TableExists(ctx, q, t.Partitions())
	case MySQL:
		parts, err = t.TableExists(ctx, q, t.PollLease())
	}
	if err != nil {
		return f, err
	}
	read := failingShapes[failingShape{wal: d.WAL(), leases: parts, logged: d.log != nil}]
	rows, err := t.bound(q).QueryContext(ctx, read.SQL(t), maxRows, MaxShares+maxFailingTopics)
	if err != nil {
		return f, fmt.Errorf("reading the failing rows: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var r FailingRows
		if err := rows.Scan(&r.Relay, &r.Topic, &r.Rows, &r.Error, &r.ErrorRows); err != nil {
			return f, fmt.Errorf("reading the failing rows: %w", err)
		}
		if r.Relay == "" {
			f.Topics = append(f.Topics, r)
		} else {
			f.Relays = append(f.Relays, r)
		}
	}
	if err := rows.Err(); err != nil {
		return f, fmt.Errorf("reading the failing rows: %w", err)
	}
	return f, nil
}

// maxFailingTopics bounds the topics a read of the failing rows lists.
const maxFailingTopics = 1000

// failingShape is what the read of the failing rows varies on: whether a
// WAL relay ran (its delivered rows are not pending), and whether the
// fast relays' leases table exists.
type failingShape struct{ wal, leases, logged bool }

// failingShapes reads the first $1 pending rows' last errors by topic and
// by the fast relay holding their partition, $2 rows at most.
var failingShapes = map[failingShape]*Statement{
	{}: define("failing/rows", func(t Tables) string { return failingRows(t, failingShape{}) }),
	{leases: true}: define("failing/rows-leases", func(t Tables) string {
		return failingRows(t, failingShape{leases: true})
	}),
	{wal: true}: define("failing/rows-wal", func(t Tables) string { return failingRows(t, failingShape{wal: true}) }),
	{wal: true, leases: true}: define("failing/rows-wal-leases", func(t Tables) string {
		return failingRows(t, failingShape{wal: true, leases: true})
	}),
	// With the fast path's delivered log.
	{logged: true}: define("failing/rows-logged", func(t Tables) string { return failingRows(t, failingShape{logged: true}) }),
	{wal: true, logged: true}: define("failing/rows-wal-logged", func(t Tables) string {
		return failingRows(t, failingShape{wal: true, logged: true})
	}),
	{leases: true, logged: true}: define("failing/rows-leases-logged", func(t Tables) string {
		return failingRows(t, failingShape{leases: true, logged: true})
	}),
	{wal: true, leases: true, logged: true}: define("failing/rows-wal-leases-logged", func(t Tables) string {
		return failingRows(t, failingShape{wal: true, leases: true, logged: true})
	}),
}

// failingRows is the read of the failing rows of shape sh. Each distinct
// error's pattern is made once; rk ranks the patterns of a topic (relay
// "") or of a relay's share.
func failingRows(t Tables, sh failingShape) string {
	var d Delivery
	if sh.wal {
		d.progress = t.WALProgress()
	}
	if sh.logged {
		d.log = &t
	}
	// The holders: none before a fast relay first ran.
	holders := `SELECT ''::text AS relay, ''::text AS topic, 0 AS partition, 1 AS n WHERE false`
	if sh.leases {
		holders = `SELECT relay, topic, partition, count(*) OVER (PARTITION BY topic) AS n FROM ` +
			pgsql.QuoteIdent(t.Partitions())
	}
	return `WITH failing AS MATERIALIZED (
			SELECT topic, aggregate_type, aggregate_id, last_error FROM (
				` + firstPending(t, d, "o.topic, o.aggregate_type, o.aggregate_id, o.last_error") + `) o
			WHERE last_error IS NOT NULL
		), holders AS (
			SELECT * FROM (` + holders + `) h WHERE relay <> ''
		), owned AS (
			SELECT '' AS relay, f.topic, f.last_error FROM failing f
			UNION ALL
			SELECT h.relay, h.topic, f.last_error FROM failing f
			JOIN holders h ON (h.topic = f.topic OR h.topic = '') AND h.partition = ` + PartitionOf("f", "h.n") + `
		), exact AS (
			SELECT relay, topic, last_error, count(*) AS n FROM owned GROUP BY relay, topic, last_error
		), grouped AS (
			SELECT relay, topic, ` + ReasonPattern("last_error") + ` AS pattern, sum(n)::bigint AS n,
				min(last_error) AS example
			FROM exact GROUP BY 1, 2, 3
		), ranked AS (
			SELECT *, row_number() OVER (PARTITION BY relay, topic ORDER BY n DESC, pattern) AS rk,
				sum(n) OVER (PARTITION BY relay, topic)::bigint AS total
			FROM grouped
		)
		SELECT relay, topic, total, example, n FROM ranked WHERE rk = 1 ORDER BY relay, topic LIMIT $2`
}
