package fastpath

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
)

// A claim's plan is generic (claimconns.go): planned once, for any
// values, on the statistics of the moment. Its late rows must be read
// through the commit-order index whatever those statistics say, never by
// walking the rows under the cursor: those are every delivered row
// retained. Statistics skewed by one transaction that wrote most of the
// retained rows (a backfill) made PostgreSQL walk the primary key under
// the cursor at every claim: a drain beside 2 million retained rows went
// from 15,000 to 600 events/s. Claims of a relay keeping the delivered
// log are held to the same.
func TestLateClaimPlansDoNotWalkTheRetainedRows(t *testing.T) {
	t.Parallel()
	db, cursor, xmax, retainedTx := retainedByOneTransaction(t, 30_000)
	for _, logged := range []bool{false, true} {
		if logged {
			// The log as the relay finds it at times: empty, and
			// analyzed so.
			_, err := db.DB.Exec(outboxdb.New(goldenClaimTable, "").FastLog().Create)
			require.NoError(t, err)
			_, err = db.DB.Exec(`ANALYZE outbox_events_delivered, outbox_events_delivered_to`)
			require.NoError(t, err)
		}
		for sh, stmt := range claimStatements(goldenClaimTable, goldenClaimPartitions, logged) {
			if !sh.late {
				continue
			}
			q := shapedQuery(sh)
			q.after = cursor
			// One late transaction listed (the retained rows' own, the
			// worst for an estimate from the statistics), and every one
			// from the snapshot's xmax on.
			q.late = openTxs{listed: []string{retainedTx}, from: xmax}
			scans := genericPlanScans(t, db.DB, stmt, stmt.bind(q))
			for _, s := range scans {
				require.NotContains(t, []string{"Seq Scan on outbox_events", "Index Scan using outbox_events_pkey",
					"Index Only Scan using outbox_events_pkey", "Bitmap Index Scan using outbox_events_pkey"}, s,
					"the generic plan of %s (logged %v) walks the rows under the cursor: %s", sh.name(), logged, strings.Join(scans, "; "))
			}
			require.Contains(t, scans, "Index Scan using outbox_events_commit_order",
				"the generic plan of %s (logged %v) reads the late rows by the commit-order index: %s", sh.name(), logged, strings.Join(scans, "; "))
		}
	}
}

// retainedByOneTransaction is a database whose outbox holds n delivered
// rows written by one transaction (retainedTx), then 5 pending
// rows of transactions of their own, analyzed; cursor is the last row's id
// and xmax a snapshot's after them.
func retainedByOneTransaction(t *testing.T, n int) (db *pgtest.DB, cursor int64, xmax, retainedTx string) {
	t.Helper()
	ctx := context.Background()
	db = pgtest.New(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	pgtest.Migrate(t, client.Schema.Create)
	// n retained rows, delivered, written by one transaction (the
	// trigger off: their numbers do not matter here), then a few pending
	// rows of transactions of their own, then fresh statistics.
	conn, err := db.DB.Conn(ctx)
	require.NoError(t, err)
	for _, q := range []string{
		`SET session_replication_role = replica`,
		`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, delivered_at)
			SELECT gen_random_uuid(), 'order.paid', 1, 'orders', 'Order', 'r-' || (g % 100), '{}', now() FROM generate_series(1, ` + fmt.Sprint(n) + `) g`,
		`RESET session_replication_role`,
	} {
		_, err := conn.ExecContext(ctx, q)
		require.NoError(t, err)
	}
	require.NoError(t, conn.Close())
	for i := range 5 {
		_, err := db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload)
			VALUES (gen_random_uuid(), 'order.paid', 1, 'orders', 'Order', $1, '{}')`, fmt.Sprintf("p-%d", i))
		require.NoError(t, err)
	}
	_, err = db.DB.Exec(`ANALYZE outbox_events`)
	require.NoError(t, err)
	require.NoError(t, db.DB.QueryRow(`SELECT max(id), pg_snapshot_xmax(pg_current_snapshot())::text FROM outbox_events`).Scan(&cursor, &xmax))
	require.NoError(t, db.DB.QueryRow(`SELECT transaction_id::text FROM outbox_events WHERE delivered_at IS NOT NULL LIMIT 1`).Scan(&retainedTx))
	return db, cursor, xmax, retainedTx
}

// genericPlanScans is how the generic plan of stmt, run with args, reads
// the tables: "<node> on <table>" or "<node> using <index>" per scan.
func genericPlanScans(t *testing.T, db *sql.DB, stmt claimSQL, args []any) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer discard(conn)
	_, err = conn.ExecContext(ctx, claimSession)
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, `PREPARE claim_plan AS `+stmt.text)
	require.NoError(t, err)
	lits := make([]string, len(args))
	for i, a := range args {
		lits[i] = sqlLiteral(t, a)
	}
	var out []byte
	require.NoError(t, conn.QueryRowContext(ctx, `EXPLAIN (FORMAT JSON) EXECUTE claim_plan(`+strings.Join(lits, ", ")+`)`).Scan(&out))
	var plans []struct{ Plan planNode }
	require.NoError(t, json.Unmarshal(out, &plans))

	var scans []string
	var walk func(n planNode)
	walk = func(n planNode) {
		switch {
		case n.Index != "":
			scans = append(scans, n.Type+" using "+n.Index)
		case n.Relation != "":
			scans = append(scans, n.Type+" on "+n.Relation)
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	for _, p := range plans {
		walk(p.Plan)
	}
	return scans
}

type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Plans    []planNode `json:"Plans"`
}

// sqlLiteral writes a claim's argument as a literal of EXECUTE.
func sqlLiteral(t *testing.T, a any) string {
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	switch v := a.(type) {
	case int, int64:
		return fmt.Sprint(v)
	case bool:
		return fmt.Sprint(v)
	case string:
		return quote(v)
	case []string:
		q := make([]string, len(v))
		for i, s := range v {
			q[i] = quote(s)
		}
		return "ARRAY[" + strings.Join(q, ",") + "]::text[]"
	case []int64:
		return "ARRAY[" + strings.Trim(fmt.Sprint(v), "[]") + "]::bigint[]"
	case []int:
		return "ARRAY[" + strings.Trim(fmt.Sprint(v), "[]") + "]::int[]"
	}
	t.Fatalf("no literal for %T", a)
	return ""
}
