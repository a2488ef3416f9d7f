package fastpath

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/relay/internal/engine"
)

// claimQuery is one claim: undelivered rows of topic ("" for every topic)
// in the given partitions (nil for all), with ids above after or written by
// one of the late transactions, not in held and not of an aggregate in
// blocked, oldest first.
type claimQuery struct {
	topic   string
	parts   []int
	after   int64
	late    openTxs
	held    []int64
	blocked []engine.Aggregate
	limit   int
	// budget is the most bytes of payload and headers the claim returns;
	// force lets its first row exceed it (nothing else is held).
	budget int64
	force  bool
	// freed is the count of releases of held bytes when the claim began.
	freed uint64
}

// openTxs is the transactions a snapshot saw as in progress: those listed,
// and every one from an id on (PostgreSQL's snapshot xmax: transactions
// from it on may have begun already, but are not listed).
type openTxs struct {
	listed []string // xid8s
	from   string   // xid8; "" for none
}

// merge is the transactions open in a or in b.
func (a openTxs) merge(b openTxs) openTxs {
	if a.from == "" {
		return b
	}
	if b.from == "" {
		return a
	}
	out := openTxs{from: a.from}
	if x, _ := strconv.ParseUint(b.from, 10, 64); x < mustXID(a.from) {
		out.from = b.from
	}
	seen := map[string]bool{}
	for _, x := range slices.Concat(a.listed, b.listed) {
		if !seen[x] {
			seen[x] = true
			out.listed = append(out.listed, x)
		}
	}
	return out
}

func mustXID(s string) uint64 {
	x, _ := strconv.ParseUint(s, 10, 64)
	return x
}

// claimed is what a claim read: its rows, and the transactions in progress
// in its snapshot (zero when it read no row).
type claimed struct {
	rows []*engine.Row
	open openTxs
	// cut tells the claim stopped at a row its byte budget had no room
	// for: more rows wait. cutSize is that row's size.
	cut     bool
	cutSize int64
}

// claimShape is what a claim's statement varies on: each combination is a
// statement of its own, planned once per connection (see claimConn), with
// a golden file of its own in testdata/claim.
type claimShape struct {
	topic   bool // the rows of one destination topic, not of every one
	parts   bool // of some partitions, not of all
	held    bool // leaving out rows held already
	blocked bool // leaving out aggregates that wait for a retry
	late    bool // also the late transactions' rows below the cursor
}

// shape is the statement q needs.
func (q claimQuery) shape() claimShape {
	return claimShape{topic: q.topic != "", parts: q.parts != nil, held: len(q.held) > 0,
		blocked: len(q.blocked) > 0, late: q.late.from != "" && q.after > 0}
}

// claimShapes is every combination.
func claimShapes() []claimShape {
	var out []claimShape
	for bits := range 1 << 5 {
		on := func(i int) bool { return bits&(1<<i) != 0 }
		out = append(out, claimShape{topic: on(0), parts: on(1), held: on(2), blocked: on(3), late: on(4)})
	}
	return out
}

// name names the shape's golden file: claim, then each option it has.
func (sh claimShape) name() string {
	name := "claim"
	for _, o := range []struct {
		on   bool
		name string
	}{{sh.topic, "topic"}, {sh.parts, "parts"}, {sh.held, "held"}, {sh.blocked, "blocked"}, {sh.late, "late"}} {
		if o.on {
			name += "-" + o.name
		}
	}
	return name
}

// claimArg names a parameter of a claim's statement.
type claimArg string

const (
	argAfter         claimArg = "after"           // the cursor: rows above it
	argLimit         claimArg = "limit"           // the most rows read
	argTopic         claimArg = "topic"           // the destination topic
	argParts         claimArg = "parts"           // the partitions to read
	argHeld          claimArg = "held"            // ids of the rows held
	argBlockedTypes  claimArg = "blocked_types"   // aggregate types of the blocked aggregates
	argBlockedIDs    claimArg = "blocked_ids"     // and their ids, in the same order
	argLateListed    claimArg = "late_listed"     // the late transactions listed
	argLateFrom      claimArg = "late_from"       // and every one from this one on
	argBudget        claimArg = "budget"          // the byte budget
	argForceFirstRow claimArg = "force_first_row" // the first row even beyond the budget
)

// claimSQL is a claim's statement: its text, and the order of its
// arguments.
type claimSQL struct {
	text string
	args []claimArg
}

// newClaimSQL writes the statement of shape sh over table, whose rows are
// spread over partitions.
func newClaimSQL(table string, partitions int, sh claimShape) claimSQL {
	var p pgsql.Params[claimArg]
	// The cursor and the limit are $1 and $2 in every shape.
	after, limit := p.Ref(argAfter), p.Ref(argLimit)
	part := partitionExpr("o", partitions)
	filter := "o.delivered_at IS NULL"
	if sh.topic {
		filter += "\nAND o.topic = " + p.Ref(argTopic)
	}
	if sh.parts {
		filter += "\nAND " + part + " = ANY(" + p.Ref(argParts) + ")"
	}
	// NOT IN over a subquery is hashed: lists of thousands stay cheap.
	if sh.held {
		filter += "\nAND o.id NOT IN (SELECT unnest(" + p.Ref(argHeld) + "::bigint[]))"
	}
	if sh.blocked {
		filter += "\nAND (o.aggregate_type, o.aggregate_id) NOT IN (SELECT * FROM unnest(" +
			p.Ref(argBlockedTypes) + "::text[], " + p.Ref(argBlockedIDs) + "::text[]))"
	}
	cols := `o.id, o.event_id, o.event_name, o.event_version, o.topic,
o.aggregate_type, o.aggregate_id, o.payload::text AS payload, o.headers::text AS headers, o.created_at,
o.attempts, o.readable_from, o.aggregate_seq, ` + part + ` AS part,
greatest(ceil(extract(epoch FROM o.available_at - now()) * 1000), 0)::bigint AS wait_ms`
	tbl := pgsql.QuoteIdent(table)
	// Above the cursor: one ordered scan of the pending index. Below it:
	// the rows of the late transactions, through the commit-order index.
	// (The delivered_at test stays outside OFFSET 0 so that the planner
	// cannot scan the pending index below the cursor instead: while a long
	// transaction holds vacuum back, that part of it is full of delivered
	// rows.)
	from := `SELECT ` + indent(cols) + `
FROM ` + tbl + ` o
WHERE ` + indent(filter) + `
  AND o.id > ` + after + `
ORDER BY o.id LIMIT ` + limit
	if sh.late {
		listed, since := p.Ref(argLateListed), p.Ref(argLateFrom)
		from = `(
  ` + indent(from) + `
)
UNION ALL
(
  SELECT ` + indent(indent(cols)) + `
  FROM (
    SELECT * FROM ` + tbl + ` o
    WHERE (o.transaction_id = ANY(` + listed + `::text[]::xid8[])
        OR o.transaction_id >= ` + since + `::text::xid8 AND o.transaction_id < pg_snapshot_xmax(pg_current_snapshot()))
      AND o.id <= ` + after + `
    OFFSET 0) o
  WHERE ` + indent(indent(filter)) + `
)`
	}
	// The byte budget: rows are kept while the running sum of their sizes
	// fits it (the first one also when forced); the first row beyond it
	// comes without its payload, to tell the claim was cut there.
	budget, force := p.Ref(argBudget), p.Ref(argForceFirstRow)
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
	return claimSQL{text: text, args: p.Names()}
}

// indent indents the lines of s after its first by two spaces, for a
// fragment written into a statement one level deeper.
func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n  ") }

// bind is the arguments of q, in the statement's order.
func (c claimSQL) bind(q claimQuery) []any {
	out := make([]any, len(c.args))
	for i, a := range c.args {
		switch a {
		case argAfter:
			out[i] = q.after
		case argLimit:
			out[i] = q.limit
		case argTopic:
			out[i] = q.topic
		case argParts:
			out[i] = q.parts
		case argHeld:
			out[i] = q.held
		case argBlockedTypes, argBlockedIDs:
			vals := make([]string, len(q.blocked))
			for j, b := range q.blocked {
				vals[j] = b.ID
				if a == argBlockedTypes {
					vals[j] = b.Type
				}
			}
			out[i] = vals
		case argLateListed:
			out[i] = q.late.listed
		case argLateFrom:
			out[i] = q.late.from
		case argBudget:
			out[i] = q.budget
		case argForceFirstRow:
			out[i] = q.force
		default:
			panic(fmt.Sprintf("relay: claim argument %q has no value", a))
		}
	}
	return out
}

// claimStatements is the statement of every shape, for one table.
func claimStatements(table string, partitions int) map[claimShape]claimSQL {
	out := map[claimShape]claimSQL{}
	for _, sh := range claimShapes() {
		out[sh] = newClaimSQL(table, partitions, sh)
	}
	return out
}

// claim reads the rows of q. Rows of transactions still open are simply
// not visible yet: nothing waits for them. The claim also reports which
// transactions were open in its snapshot. A row below the cursor that
// becomes visible later can only be theirs: its id was taken before that of
// a row the claim saw committed, so its transaction had begun. The next
// claims read those transactions' rows below the cursor in the same
// snapshot as the rows above it, so an aggregate's rows come out in id
// order however their transactions' ids interleave.
func (s *store) claim(ctx context.Context, conn *claimConn, q claimQuery) (claimed, error) {
	stmt := s.claims[q.shape()]
	query, args := stmt.text, stmt.bind(q)
	db, err := conn.get(ctx)
	if err != nil {
		return claimed{}, err
	}
	defer conn.put()
	// Through pgx itself rather than database/sql: a claim reads thousands
	// of rows, and database/sql's per-value conversions cost more than
	// reading them.
	var out claimed
	err = db.Raw(func(dc any) error {
		rows, err := dc.(*stdlib.Conn).Conn().Query(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			r := &engine.Row{}
			var (
				waitMS   int64
				kept     bool
				open     *string
				eventID  pgtype.UUID
				readable *int64
				seq      *int64
			)
			if err := rows.Scan(&r.ID, &eventID, &r.Name, &r.Version, &r.Topic, &r.AggregateType, &r.AggregateID,
				&r.Payload, &r.Headers, &r.CreatedAt, &r.Attempts, &readable, &seq, &r.Partition, &waitMS, &r.Size, &kept, &open); err != nil {
				return err
			}
			if r.ID == 0 {
				xmax, xip, _ := strings.Cut(*open, ":")
				out.open = openTxs{from: xmax, listed: []string{}}
				if xip != "" {
					out.open.listed = strings.Split(xip, ",")
				}
				continue
			}
			if !kept {
				out.cut, out.cutSize = true, r.Size
				continue
			}
			r.EventID = eventID.Bytes
			if readable != nil {
				r.ReadableFrom = int(*readable)
			}
			if seq != nil {
				r.AggregateSeq = *seq
			}
			r.Wait = time.Duration(waitMS) * time.Millisecond
			out.rows = append(out.rows, r)
		}
		return rows.Err()
	})
	if err != nil {
		conn.reset()
		return claimed{}, err
	}
	return out, nil
}
