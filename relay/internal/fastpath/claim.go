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

	"github.com/entoutbox/entoutbox/internal/outboxdb"
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
	// fromFloor tells a claim from the oldest row began at the delivered
	// log's floor instead (after and late are the floor's): every row
	// under it that its snapshot saw is delivered.
	fromFloor bool
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

// claimArg names a parameter of a claim's statement (see
// outboxdb.ClaimArg).
type claimArg = outboxdb.ClaimArg

const (
	argAfter         = outboxdb.ClaimAfter
	argLimit         = outboxdb.ClaimLimit
	argTopic         = outboxdb.ClaimTopic
	argParts         = outboxdb.ClaimParts
	argHeld          = outboxdb.ClaimHeld
	argBlockedTypes  = outboxdb.ClaimBlockedTypes
	argBlockedIDs    = outboxdb.ClaimBlockedIDs
	argLateListed    = outboxdb.ClaimLateListed
	argLateFrom      = outboxdb.ClaimLateFrom
	argBudget        = outboxdb.ClaimBudget
	argForceFirstRow = outboxdb.ClaimForceFirstRow
)

// claimSQL is a claim's statement: its text, and the order of its
// arguments.
type claimSQL struct {
	text string
	args []claimArg
}

// newClaimSQL is the statement of shape sh over table, whose rows are
// spread over partitions; its text is outboxdb's.
func newClaimSQL(table string, partitions int, sh claimShape, logged bool) claimSQL {
	c := outboxdb.Claim(outboxdb.New(table, ""), partitions, outboxdb.ClaimShape{
		Topic: sh.topic, Parts: sh.parts, Held: sh.held, Blocked: sh.blocked, Late: sh.late, Logged: logged})
	return claimSQL{text: c.Text, args: c.Args}
}

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

// claimStatements is the statement of every shape, for one table; logged
// leaves out the rows its delivered log delivered.
func claimStatements(table string, partitions int, logged bool) map[claimShape]claimSQL {
	out := map[claimShape]claimSQL{}
	for _, sh := range claimShapes() {
		out[sh] = newClaimSQL(table, partitions, sh, logged)
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
