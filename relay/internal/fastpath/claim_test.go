package fastpath

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/relay/internal/engine"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/ from the code")

// goldenClaimTable and goldenClaimPartitions are the table and partition
// count the golden claims are written for.
const (
	goldenClaimTable      = "outbox_events"
	goldenClaimPartitions = 16
)

// goldenClaim is the golden file's text of a claim statement: its
// arguments in order, then the statement.
func goldenClaim(sh claimShape, stmt claimSQL) string {
	var b strings.Builder
	fmt.Fprintf(&b, "-- %s: the claim of table %s, %d partitions.\n", sh.name(), goldenClaimTable, goldenClaimPartitions)
	for i, a := range stmt.args {
		fmt.Fprintf(&b, "-- $%d: %s\n", i+1, a)
	}
	b.WriteString(stmt.text)
	b.WriteString("\n")
	return b.String()
}

// Each shape of the claim has its statement in testdata/claim: a change
// of the SQL shows as a change of those files (go test
// ./relay/internal/fastpath -run TestClaimSQLGolden -update rewrites
// them), and a file no shape writes any more fails the test.
func TestClaimSQLGolden(t *testing.T) {
	dir := filepath.Join("testdata", "claim")
	stmts := claimStatements(goldenClaimTable, goldenClaimPartitions, false)
	var names []string
	for _, sh := range claimShapes() {
		name := sh.name() + ".sql"
		names = append(names, name)
		got := goldenClaim(sh, stmts[sh])
		path := filepath.Join(dir, name)
		if *update {
			require.NoError(t, os.MkdirAll(dir, 0o755))
			require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
			continue
		}
		want, err := os.ReadFile(path)
		require.NoError(t, err, "no golden file for shape %s: run with -update", sh.name())
		require.Equal(t, string(want), got, "the claim of shape %s differs from %s: run with -update if the change is meant", sh.name(), path)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.sql"))
	require.NoError(t, err)
	for _, f := range files {
		if !slices.Contains(names, filepath.Base(f)) {
			if *update {
				require.NoError(t, os.Remove(f))
				continue
			}
			t.Errorf("%s is the golden file of no claim shape: run with -update to remove it", f)
		}
	}
	require.Len(t, names, 32, "five options, each on or off")
}

// Every argument a statement names has a value, and the statement names
// every parameter it takes, once.
func TestClaimSQLBindsEveryArgument(t *testing.T) {
	for sh, stmt := range claimStatements(goldenClaimTable, goldenClaimPartitions, false) {
		args := stmt.bind(shapedQuery(sh))
		require.Len(t, args, len(stmt.args))
		for i := range stmt.args {
			require.Contains(t, stmt.text, fmt.Sprintf("$%d", i+1), "shape %s", sh.name())
		}
		require.NotContains(t, stmt.text, fmt.Sprintf("$%d", len(stmt.args)+1), "shape %s", sh.name())
	}
}

// shapedQuery is a claim of shape sh, its lists not empty where the shape
// reads them.
func shapedQuery(sh claimShape) claimQuery {
	q := claimQuery{after: 1, limit: 100, budget: 1 << 20}
	if sh.topic {
		q.topic = "orders"
	}
	if sh.parts {
		q.parts = []int{0}
	}
	if sh.held {
		q.held = []int64{0}
	}
	if sh.blocked {
		q.blocked = []engine.Aggregate{{Type: "Order", ID: "none"}}
	}
	if sh.late {
		q.late = openTxs{listed: []string{}, from: "1"}
	}
	return q
}

// Each shape runs on PostgreSQL and reads what its options say: the
// undelivered rows of the topic and partitions asked for, above the
// cursor or of a late transaction (listed, or from an id on), less those held and the blocked
// aggregates'.
func TestClaimShapesReadWhatTheySay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
	pgtest.Migrate(t, client.Schema.Create)
	// Each row in a transaction of its own: 24 aggregates over two
	// topics; every fifth row delivered.
	for i := range 48 {
		_, err := db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id,
			payload, headers, delivered_at) VALUES (gen_random_uuid(), 'order.paid', 1, $1, 'Order', $2, '{}', '{}',
			CASE WHEN $3 THEN now() END)`, []string{"orders", "invoices"}[i%2], fmt.Sprintf("a-%d", i%24), i%5 == 4)
		require.NoError(t, err)
	}
	type stored struct {
		id         int64
		topic, agg string
		part       int
		tx         string
		delivered  bool
	}
	var all []stored
	rows, err := db.DB.Query(`SELECT id, topic, aggregate_id, ` + partitionExpr("o", goldenClaimPartitions) + `,
		transaction_id::text, delivered_at IS NOT NULL FROM outbox_events o ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var r stored
		require.NoError(t, rows.Scan(&r.id, &r.topic, &r.agg, &r.part, &r.tx, &r.delivered))
		all = append(all, r)
	}
	require.NoError(t, rows.Err())

	s := newStore(db.DB, Settings{Table: goldenClaimTable, Partitions: goldenClaimPartitions})
	cursor := all[20].id
	late := all[6] // below the cursor, written by a "late" transaction
	for _, sh := range claimShapes() {
		q := claimQuery{after: cursor, limit: 1000, budget: 1 << 30}
		if sh.topic {
			q.topic = "orders"
		}
		if sh.parts {
			q.parts = []int{}
			for p := range goldenClaimPartitions {
				if p%3 != 0 {
					q.parts = append(q.parts, p)
				}
			}
		}
		if sh.held {
			q.held = []int64{all[30].id, all[31].id, late.id}
		}
		if sh.blocked {
			q.blocked = []engine.Aggregate{{Type: "Order", ID: all[40].agg}, {Type: "Order", ID: late.agg}}
		}
		if sh.late {
			// Listed: one late transaction under the range, and one in
			// it (its rows come once).
			q.late = openTxs{listed: []string{late.tx, all[12].tx}, from: all[10].tx}
		}
		require.Equal(t, sh, q.shape())
		pool, stop := shareClaimPool(s.db, false)
		conn := claimConn{pool: pool}
		got, err := s.claim(ctx, &conn, q)
		stop()
		require.NoError(t, err, "shape %s", sh.name())
		var gotIDs, want []int64
		for _, r := range got.rows {
			gotIDs = append(gotIDs, r.ID)
		}
		for _, r := range all {
			switch {
			case r.delivered,
				sh.topic && r.topic != q.topic,
				sh.parts && !slices.Contains(q.parts, r.part),
				slices.Contains(q.held, r.id),
				slices.Contains(q.blocked, engine.Aggregate{Type: "Order", ID: r.agg}),
				r.id <= cursor && !(sh.late && (r.tx == late.tx || mustXID(r.tx) >= mustXID(all[10].tx))):
				continue
			}
			want = append(want, r.id)
		}
		require.NotEmpty(t, want, "shape %s", sh.name())
		require.Equal(t, want, gotIDs, "shape %s", sh.name())
	}
}
