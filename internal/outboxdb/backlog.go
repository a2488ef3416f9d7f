package outboxdb

import (
	"context"
	"fmt"
	"strings"
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
	q = t.bound(q)
	var progress []any // the WAL path's, PostgreSQL's alone
	if t.Dialect == Postgres {
		progress = []any{pgsql.QuoteIdent(t.WALProgress())}
	}
	if err := queryRow(ctx, q, backlogNow.SQL(t), progress, &p.At, &wal); err != nil {
		return Pending{}, fmt.Errorf("reading the outbox backlog: %w", err)
	}
	logged := false
	if t.Dialect == Postgres {
		var err error
		if logged, err = t.HasDeliveredLog(ctx, q); err != nil {
			return Pending{}, fmt.Errorf("reading the outbox backlog: %w", err)
		}
	}
	read := map[[2]bool]*Statement{{false, false}: backlogPending, {true, false}: backlogPendingWAL,
		{false, true}: backlogPendingLogged, {true, true}: backlogPendingWALLogged}[[2]bool{wal, logged}]
	rows, err := q.QueryContext(ctx, read.SQL(t), maxRows)
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
	q = t.bound(q)
	settled, err := t.columnExists(ctx, q, t.DeadLetters, "discarded_at")
	if err != nil {
		return OpenDeadLetters{}, fmt.Errorf("reading the dead-letter table: %w", err)
	}
	read := backlogOpenLettersUnsettled
	if settled {
		read = backlogOpenLetters
	}
	var n OpenDeadLetters
	err = queryRow(ctx, q, read.SQL(t), []any{maxRows}, &n.Relay, &n.Consumer)
	if err != nil {
		return OpenDeadLetters{}, fmt.Errorf("counting dead letters: %w", err)
	}
	return n, nil
}

// DeadLetterSummary counts the dead letters by state, each up to a bound,
// and the open ones by source and by source and reason pattern.
type DeadLetterSummary struct {
	Open, Retried, Discarded int64
	// Each tells its count reached the bound: there are at least that
	// many.
	OpenCapped, RetriedCapped, DiscardedCapped bool
	// BySource and ByReason count the newest open letters, as many as
	// Open counts: by source ("relay" first, then the consumers by name;
	// at most MaxSources), and by source and reason pattern
	// (ReasonPattern), most frequent first, the reasons asked for of
	// each source.
	BySource []SourceCount
	ByReason []ReasonCount
}

// SourceCount is how many open letters one source wrote, and with how
// many reason patterns.
type SourceCount struct {
	Source  string
	Count   int64
	Reasons int64
}

// ReasonCount is how many open letters of one source have reasons of one
// pattern; Example is the newest one's reason, as written.
type ReasonCount struct {
	Source, Reason, Example string
	Count                   int64
}

// MaxSources bounds the sources a summary lists: "relay" and the consumer
// names, a few in any real deployment.
const MaxSources = 1000

// ReadDeadLetterSummary counts the dead letters of t: those of each state
// up to maxRows (DefaultMaxRows when not positive), and the newest maxRows
// open ones by source and by reason pattern, listing maxReasons patterns
// of each source. A dead-letter table of an earlier version has no
// columns for what an operator did: all its letters are open.
func ReadDeadLetterSummary(ctx context.Context, q Querier, t Tables, maxRows, maxReasons int) (DeadLetterSummary, error) {
	if maxRows <= 0 {
		maxRows = DefaultMaxRows
	}
	q = t.bound(q)
	settled, err := t.columnExists(ctx, q, t.DeadLetters, "discarded_at")
	if err != nil {
		return DeadLetterSummary{}, fmt.Errorf("reading the dead-letter table: %w", err)
	}
	counts, byReason := backlogLetterCountsUnsettled, backlogLettersByReasonUnsettled
	if settled {
		counts, byReason = backlogLetterCounts, backlogLettersByReason
	}
	s := DeadLetterSummary{BySource: []SourceCount{}, ByReason: []ReasonCount{}}
	if err := queryRow(ctx, q, counts.SQL(t), []any{maxRows}, &s.Open, &s.Retried, &s.Discarded); err != nil {
		return s, fmt.Errorf("counting dead letters: %w", err)
	}
	bound := int64(maxRows)
	s.OpenCapped, s.RetriedCapped, s.DiscardedCapped = s.Open >= bound, s.Retried >= bound, s.Discarded >= bound
	rows, err := q.QueryContext(ctx, byReason.SQL(t), maxRows, MaxSources, maxReasons)
	if err != nil {
		return s, fmt.Errorf("counting dead letters by reason: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			source, pattern, example string
			rank, n, patterns        int64
		)
		if err := rows.Scan(&source, &rank, &pattern, &example, &n, &patterns); err != nil {
			return s, fmt.Errorf("counting dead letters by reason: %w", err)
		}
		if rank == 0 {
			s.BySource = append(s.BySource, SourceCount{Source: source, Count: n, Reasons: patterns})
		} else {
			s.ByReason = append(s.ByReason, ReasonCount{Source: source, Reason: pattern, Example: example, Count: n})
		}
	}
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("counting dead letters by reason: %w", err)
	}
	return s, nil
}

// The backlog's reads. A dead-letter table of an earlier version has no
// columns for what an operator did (unsettled): all its letters are open.
var (
	// backlogNow reads the database's time and whether table $1 (the WAL
	// progress table, quoted) exists.
	backlogNow = define("backlog/now", func(Tables) string { return `SELECT now(), to_regclass($1) IS NOT NULL` })
	// backlogPending counts the first $1 pending rows by topic, with the
	// oldest's created_at; backlogPendingWAL once a WAL relay ran.
	backlogPending    = define("backlog/pending", func(t Tables) string { return pendingByTopic(t, Delivery{}) })
	backlogPendingWAL = define("backlog/pending-wal", func(t Tables) string {
		return pendingByTopic(t, Delivery{progress: t.WALProgress()})
	})
	// backlogPendingLogged once a fast relay kept a delivered log, and
	// backlogPendingWALLogged with both.
	backlogPendingLogged = define("backlog/pending-logged", func(t Tables) string {
		return pendingByTopic(t, Delivery{log: &t})
	})
	backlogPendingWALLogged = define("backlog/pending-wal-logged", func(t Tables) string {
		return pendingByTopic(t, Delivery{progress: t.WALProgress(), log: &t})
	})
	// backlogOpenLetters counts up to $1 open letters of the relay, and up
	// to $1 of the consumers.
	backlogOpenLetters          = define("backlog/open-letters", func(t Tables) string { return openLetters(t, true) })
	backlogOpenLettersUnsettled = define("backlog/open-letters-unsettled", func(t Tables) string { return openLetters(t, false) })
	// backlogLetterCounts counts up to $1 letters open, retried and
	// discarded.
	backlogLetterCounts          = define("backlog/letter-counts", func(t Tables) string { return letterCounts(t, true) })
	backlogLetterCountsUnsettled = define("backlog/letter-counts-unsettled", func(t Tables) string { return letterCounts(t, false) })
	// backlogLettersByReason counts the newest $1 open letters by source
	// (at most $2) and by source and reason pattern (the $3 most frequent
	// of each source).
	backlogLettersByReason          = define("backlog/letters-by-reason", func(t Tables) string { return lettersByReason(t, true) })
	backlogLettersByReasonUnsettled = define("backlog/letters-by-reason-unsettled", func(t Tables) string {
		return lettersByReason(t, false)
	})
)

// pendingByTopic is backlogPending for the delivery marks d.
func pendingByTopic(t Tables, d Delivery) string {
	return `SELECT topic, count(*), min(created_at) FROM (
			` + firstPending(t, d, "o.topic, o.created_at") + `) o
		GROUP BY topic ORDER BY topic`
}

// firstPending reads cols (of outbox row o) of the first $1 rows of t
// pending by the delivery marks d, in id order. With a delivered log,
// whose rows keep delivered_at NULL, it reads above the log's floor, and
// below it the rows its snapshot may not have seen, each through an
// index, rather than step over every row the log delivered.
func firstPending(t Tables, d Delivery, cols string) string {
	from := `SELECT o.id, ` + cols + ` FROM ` + pgsql.QuoteIdent(t.Outbox) + ` o WHERE ` + d.Pending("o")
	if d.log == nil {
		return from + ` ORDER BY o.id LIMIT $1`
	}
	parts := d.log.belowFloor("o")
	for i, cond := range parts {
		if i == 0 {
			parts[i] = `(` + from + ` AND ` + cond + ` ORDER BY o.id LIMIT $1)`
			continue
		}
		// Under the floor, the rows are found by the commit-order index
		// and sorted after: ordered by id with a limit, the planner
		// walked the primary key under the floor instead, every retained
		// row (700 ms a read beside a million).
		parts[i] = `(SELECT * FROM (` + from + ` AND ` + cond + ` OFFSET 0) b ORDER BY b.id LIMIT $1)`
	}
	return `SELECT * FROM (` + strings.Join(parts, "\n\t\t\tUNION ALL ") + `) p ORDER BY id LIMIT $1`
}

// openLetters is backlogOpenLetters, on a table with the operator's
// columns (settled) or without.
func openLetters(t Tables, settled bool) string {
	open := ""
	if settled {
		open = " AND discarded_at IS NULL AND retried_at IS NULL"
	}
	dl, limit := t.Dialect.quote(t.DeadLetters), t.Dialect.param(1)
	return `SELECT
		(SELECT count(*) FROM (SELECT 1 FROM ` + dl + ` WHERE source = 'relay'` + open + ` LIMIT ` + limit + `) r),
		(SELECT count(*) FROM (SELECT 1 FROM ` + dl + ` WHERE source <> 'relay'` + open + ` LIMIT ` + limit + `) c)`
}

// letterCounts is backlogLetterCounts, settled or not as openLetters.
func letterCounts(t Tables, settled bool) string {
	dl := t.Dialect.quote(t.DeadLetters)
	count := func(state string) string {
		where := ""
		if settled {
			where = " WHERE " + letterState[state]
		} else if state != LetterOpen {
			return "0"
		}
		return `(SELECT count(*) FROM (SELECT 1 FROM ` + dl + where + ` LIMIT ` + t.Dialect.param(1) + `) x)`
	}
	return `SELECT ` + count(LetterOpen) + `, ` + count(LetterRetried) + `, ` + count(LetterDiscarded)
}

// lettersByReason is backlogLettersByReason, settled or not as
// openLetters. The patterns are made once per distinct reason; rk ranks
// them within their source, and a row of rk 0 is the source's own.
func lettersByReason(t Tables, settled bool) string {
	dl := pgsql.QuoteIdent(t.DeadLetters)
	open := ""
	if settled {
		open = " WHERE " + letterState[LetterOpen]
	}
	return `WITH open AS MATERIALIZED (
			SELECT id, source, reason FROM ` + dl + open + ` ORDER BY id DESC LIMIT $1
		), exact AS (
			SELECT source, reason, count(*) AS n, max(id) AS newest FROM open GROUP BY source, reason
		), patterns AS (
			SELECT source, ` + ReasonPattern("reason") + ` AS pattern, n, newest, reason FROM exact
		), grouped AS (
			SELECT source, pattern, sum(n)::bigint AS n, (array_agg(reason ORDER BY newest DESC))[1] AS example
			FROM patterns GROUP BY source, pattern
		), ranked AS (
			SELECT *, row_number() OVER (PARTITION BY source ORDER BY n DESC, pattern) AS rk FROM grouped
		), sources AS (
			SELECT source, sum(n)::bigint AS n, count(*) AS patterns FROM grouped
			GROUP BY source ORDER BY source <> 'relay', source LIMIT $2
		)
		SELECT * FROM (
			SELECT s.source, 0::bigint AS rk, '' AS pattern, '' AS example, s.n, s.patterns FROM sources s
			UNION ALL
			SELECT r.source, r.rk, r.pattern, r.example, r.n, 0 FROM ranked r JOIN sources USING (source) WHERE r.rk <= $3
		) u ORDER BY source <> 'relay', source, rk`
}
