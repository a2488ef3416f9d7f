package outboxdb

import (
	"strconv"
	"strings"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// The fast path's claim: the undelivered rows of some partitions, oldest
// first, within a byte budget. Its text varies on five options, each a
// statement of its own that the relay plans once per connection; the
// relay runs it through pgx for speed, the text being this package's.

// ClaimShape is what a claim's statement varies on.
type ClaimShape struct {
	Topic   bool // the rows of one destination topic, not of every one
	Parts   bool // of some partitions, not of all
	Held    bool // leaving out rows held already
	Blocked bool // leaving out aggregates that wait for a retry
	Late    bool // also the late transactions' rows below the cursor
	// Logged leaves out the rows the delivered log delivered (the relay
	// keeps one: Tables.FastLog).
	Logged bool
}

// ClaimArg names a parameter of a claim's statement.
type ClaimArg string

// The parameters of the claims.
const (
	ClaimAfter         ClaimArg = "after"           // the cursor: rows above it
	ClaimLimit         ClaimArg = "limit"           // the most rows read
	ClaimTopic         ClaimArg = "topic"           // the destination topic
	ClaimParts         ClaimArg = "parts"           // the partitions to read
	ClaimHeld          ClaimArg = "held"            // ids of the rows held
	ClaimBlockedTypes  ClaimArg = "blocked_types"   // aggregate types of the blocked aggregates
	ClaimBlockedIDs    ClaimArg = "blocked_ids"     // and their ids, in the same order
	ClaimLateListed    ClaimArg = "late_listed"     // the late transactions listed
	ClaimLateFrom      ClaimArg = "late_from"       // and every one from this one on
	ClaimBudget        ClaimArg = "budget"          // the byte budget
	ClaimForceFirstRow ClaimArg = "force_first_row" // the first row even beyond the budget
)

// ClaimSQL is a claim's statement: its text, and the order of its
// arguments.
type ClaimSQL struct {
	Text string
	Args []ClaimArg
}

// The claims without options and with all, for review; each of the 32 is
// held to a golden file by the fast path's tests too.
var (
	_ = define("fastpath/claim", func(t Tables) string { return Claim(t, 16, ClaimShape{}).Text })
	_ = define("fastpath/claim-topic-parts-held-blocked-late", func(t Tables) string {
		return Claim(t, 16, ClaimShape{Topic: true, Parts: true, Held: true, Blocked: true, Late: true}).Text
	})
	_ = define("fastpath/claim-logged-late", func(t Tables) string {
		return Claim(t, 16, ClaimShape{Late: true, Logged: true}).Text
	})
)

// claimCols is what a claim reads of outbox row o in partition part.
func claimCols(part string) string {
	return `o.id, o.event_id, o.event_name, o.event_version, o.topic,
o.aggregate_type, o.aggregate_id, o.payload::text AS payload, o.headers::text AS headers, o.created_at,
o.attempts, o.readable_from, o.aggregate_seq, ` + part + ` AS part,
greatest(ceil(extract(epoch FROM o.available_at - now()) * 1000), 0)::bigint AS wait_ms`
}

// claimFilter is the condition on outbox row o of a claim of shape sh.
func claimFilter(t Tables, p *pgsql.Params[ClaimArg], part string, sh ClaimShape) string {
	filter := "o.delivered_at IS NULL"
	if sh.Logged {
		filter += "\nAND NOT " + t.FastLogged("o")
	}
	if sh.Topic {
		filter += "\nAND o.topic = " + p.Ref(ClaimTopic)
	}
	if sh.Parts {
		filter += "\nAND " + part + " = ANY(" + p.Ref(ClaimParts) + ")"
	}
	// NOT IN over a subquery is hashed: lists of thousands stay cheap.
	if sh.Held {
		filter += "\nAND o.id NOT IN (SELECT unnest(" + p.Ref(ClaimHeld) + "::bigint[]))"
	}
	if sh.Blocked {
		filter += "\nAND (o.aggregate_type, o.aggregate_id) NOT IN (SELECT * FROM unnest(" +
			p.Ref(ClaimBlockedTypes) + "::text[], " + p.Ref(ClaimBlockedIDs) + "::text[]))"
	}
	return filter
}

// claimRows is the rows a claim reads, before its byte budget. Above the
// cursor: one ordered scan of the pending index. Below it: the rows of
// the late transactions, through the commit-order index. (The
// delivered_at test stays outside OFFSET 0 so that the planner cannot scan
// the pending index below the cursor instead: while a long transaction
// holds vacuum back, that part of it is full of delivered rows.)
//
// The claim's plan is generic (planned once, without its parameters'
// values), so each late transaction listed is looked up by a range on
// transaction_id, never by an equality: a range with parameters is
// estimated without the table's statistics, an equality from them, and
// one transaction that wrote millions of the rows retained (a backfill, a
// bulk import) made the equality look unselective enough that the plan
// walked the primary key under the cursor, every retained row, at every
// claim. The listed ones from the range's start on are in the range.
func claimRows(p *pgsql.Params[ClaimArg], tbl, cols, filter, after, limit string, late bool) string {
	from := `SELECT ` + indent(cols) + `
FROM ` + tbl + ` o
WHERE ` + indent(filter) + `
  AND o.id > ` + after + `
ORDER BY o.id LIMIT ` + limit
	if !late {
		return from
	}
	listed, since := p.Ref(ClaimLateListed), p.Ref(ClaimLateFrom)
	return `(
  ` + indent(from) + `
)
UNION ALL
(
  SELECT ` + indent(indent(cols)) + `
  FROM (
    SELECT * FROM ` + tbl + ` o
    WHERE o.transaction_id >= ` + since + `::text::xid8 AND o.transaction_id < pg_snapshot_xmax(pg_current_snapshot())
      AND o.id <= ` + after + `
    UNION ALL
    SELECT l.* FROM unnest(` + listed + `::text[]::xid8[]) x(xid) CROSS JOIN LATERAL (
      SELECT * FROM ` + tbl + ` o
      WHERE o.transaction_id >= x.xid AND o.transaction_id <= x.xid AND o.id <= ` + after + `
      OFFSET 0) l
    WHERE x.xid < ` + since + `::text::xid8
    OFFSET 0) o
  WHERE ` + indent(indent(filter)) + `
)`
}

// Claim writes the claim of shape sh on t's outbox table, whose rows are
// spread over partitions.
func Claim(t Tables, partitions int, sh ClaimShape) ClaimSQL {
	var p pgsql.Params[ClaimArg]
	// The cursor and the limit are $1 and $2 in every shape.
	after, limit := p.Ref(ClaimAfter), p.Ref(ClaimLimit)
	part := PartitionOf("o", strconv.Itoa(partitions))
	from := claimRows(&p, pgsql.QuoteIdent(t.Outbox), claimCols(part), claimFilter(t, &p, part, sh), after, limit, sh.Late)
	// The byte budget: rows are kept while the running sum of their sizes
	// fits it (the first one also when forced); the first row beyond it
	// comes without its payload, to tell the claim was cut there.
	budget, force := p.Ref(ClaimBudget), p.Ref(ClaimForceFirstRow)
	sized := `SELECT v.*, v.running <= ` + budget + ` OR v.n = 1 AND ` + force + ` AS kept
FROM (
  SELECT u.*, sum(u.size) OVER (ORDER BY u.id) AS running, row_number() OVER (ORDER BY u.id) AS n
  FROM (
    SELECT t.*, coalesce(octet_length(t.payload), 0) + coalesce(octet_length(t.headers), 0) AS size
    FROM (
      ` + indent(indent(indent(from))) + `
    ) t
    ORDER BY t.id LIMIT ` + limit + `
  ) u
) v`
	// A first row of id 0, always there, carries the snapshot's open
	// transactions as "xmax:xip,xip...", so that even a claim that finds
	// nothing tells them.
	text := `SELECT * FROM (
  SELECT 0::bigint, NULL::uuid, '', 0, '', '', '', NULL::text, NULL::text, now(), 0, NULL::bigint, NULL::bigint,
    0, 0::bigint, 0::bigint, true,
    pg_snapshot_xmax(pg_current_snapshot())::text || ':' ||
      array_to_string(ARRAY(SELECT pg_snapshot_xip(pg_current_snapshot())), ',')
  UNION ALL
  SELECT w.id, w.event_id, w.event_name, w.event_version, w.topic, w.aggregate_type, w.aggregate_id,
    CASE WHEN w.kept THEN w.payload END, CASE WHEN w.kept THEN w.headers END, w.created_at, w.attempts,
    w.readable_from, w.aggregate_seq, w.part, w.wait_ms, w.size, w.kept, NULL
  FROM (
    ` + indent(indent(sized)) + `
  ) w
  WHERE w.running - w.size <= ` + budget + `
) c
ORDER BY 1`
	return ClaimSQL{Text: text, Args: p.Names()}
}

// indent indents the lines of s after its first by two spaces, for a
// fragment written into a statement one level deeper.
func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n  ") }
