package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/schema"
)

// emitShape is a shape of the transactions the emit cost times: how
// many events each writes, and over how many aggregates.
type emitShape struct {
	events int
	// oneAggregate puts every event of every transaction on one
	// aggregate (a tenant, an account: its counter row written by each);
	// else each event goes to its own, spread over --aggregates ids.
	oneAggregate bool
}

// emitShapes are the emit cost table's rows: 1, 10 and 100 events per
// transaction, on one aggregate and spread over many.
var emitShapes = []emitShape{{1, true}, {1, false}, {10, true}, {10, false}, {100, true}, {100, false}}

// transactions is how many transactions of each variant the shape times:
// fewer for bigger transactions, so that each row takes about as long.
func (sh emitShape) transactions(emitTx int) int {
	return max(10, emitTx*2/(sh.events+1))
}

// plainTable is the outbox table's copy without the numbering trigger
// (LIKE ... INCLUDING ALL: its columns, defaults, indexes): the floor, what
// an application writes without order numbers.
const plainTable = "outbox_plain"

// insertRows is a multi-row INSERT of n events into table, as an
// application would write them without entoutbox (relay.SchemaAdapter's
// columns), the payload already encoded.
func insertRows(table string, n int) string {
	var q strings.Builder
	q.WriteString(`INSERT INTO ` + pgsql.QuoteIdent(table) +
		` (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers) VALUES `)
	for k := range n {
		if k > 0 {
			q.WriteByte(',')
		}
		c := k * 8
		fmt.Fprintf(&q, "($%d,$%d,$%d,$%d,$%d,$%d,$%d::jsonb,$%d::jsonb)", c+1, c+2, c+3, c+4, c+5, c+6, c+7, c+8)
	}
	q.WriteString(` ON CONFLICT (event_id) DO NOTHING`)
	return q.String()
}

// emitVariant is one way of writing a shape's events in a transaction.
type emitVariant struct {
	name string
	run  func(ctx context.Context, i int) error
	took []time.Duration
}

// emitRow is one shape's result: the mean and p50 of each variant.
type emitRow struct {
	shape               emitShape
	tx                  int
	plain, numbered, em cost
}

// measureEmitCost times whole transactions (begin to commit) of each
// shape written three ways, in turn, so that drift on the server
// (autovacuum, checkpoints, a growing table) hits each alike: a plain
// INSERT into a copy of the outbox table without numbering (the floor),
// the same INSERT into the outbox table (its trigger numbers the rows),
// and generated Emits (numbered in Emit's own statement).
func measureEmitCost(ctx context.Context, e *env) (string, error) {
	s, err := newSandbox(ctx, e)
	if err != nil {
		return "", err
	}
	defer s.close()
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE `+pgsql.QuoteIdent(plainTable)+` (LIKE `+
		pgsql.QuoteIdent(schema.OutboxTable)+` INCLUDING ALL)`); err != nil {
		return "", fmt.Errorf("creating the plain table: %w", err)
	}
	// The INSERTs get the payload already encoded: encoding and validating
	// it is part of what Emit costs.
	body, err := json.Marshal(payload)
	if err != nil {
		return "", fmt.Errorf("encoding the payload: %w", err)
	}
	var rows []emitRow
	for _, sh := range emitShapes {
		variants := emitVariants(s, string(body), sh, e.cfg.Aggregates)
		n := sh.transactions(e.cfg.EmitTx)
		if err := e.timeVariants(ctx, variants, n, sh.String(e.cfg.Aggregates)); err != nil {
			return "", err
		}
		rows = append(rows, emitRow{shape: sh, tx: n, plain: summarizeCost(variants[0].took),
			numbered: summarizeCost(variants[1].took), em: summarizeCost(variants[2].took)})
	}
	return formatEmitCost(rows, e.cfg.Aggregates), nil
}

func (sh emitShape) String(aggs int) string {
	if sh.oneAggregate {
		return fmt.Sprintf("%d events/tx on 1 aggregate", sh.events)
	}
	return fmt.Sprintf("%d events/tx over %d aggregates", sh.events, aggs)
}

// formatEmitCost is the emit cost table.
func formatEmitCost(rows []emitRow, aggs int) string {
	var b strings.Builder
	b.WriteString("emit cost (whole transactions, begin to commit, the three interleaved; mean per transaction, p50 in brackets):\n")
	fmt.Fprintf(&b, "  %-34s %-6s %-22s %-22s %-22s %-12s %s\n", "events per transaction", "tx", "plain INSERT (floor)",
		"INSERT, trigger numbers", "Emit", "Emit/floor", "Emit/trigger-numbered INSERT")
	for _, r := range rows {
		fmt.Fprintf(&b, "  %-34s %-6d %-22s %-22s %-22s %-12s %.2fx\n", r.shape.String(aggs), r.tx,
			fmtCost(r.plain), fmtCost(r.numbered), fmtCost(r.em), fmt.Sprintf("%.2fx", ratio(r.em.mean, r.plain.mean)),
			ratio(r.em.mean, r.numbered.mean))
	}
	b.WriteString("  floor: the same rows by one multi-row INSERT, payload encoded already, into a copy of the outbox table" +
		" without the numbering trigger (no order numbers); trigger-numbered: that INSERT into the outbox table," +
		" whose trigger numbers rows written without Emit")
	return b.String()
}

func fmtCost(c cost) string { return fmtMs(c.mean) + " (" + fmtMs(c.p50) + ")" }

// emitVariants are the transactions compared for shape sh, in the order
// the table reads them: plain INSERT, trigger-numbered INSERT, Emits.
func emitVariants(s *sandbox, body string, sh emitShape, aggs int) []*emitVariant {
	aggregate := func(i, k int) string {
		if sh.oneAggregate {
			return "hot"
		}
		return aggregateID(i*sh.events+k, aggs)
	}
	// args is the INSERTs' arguments for transaction i's events.
	args := func(i int) ([]any, error) {
		out := make([]any, 0, 8*sh.events)
		for k := range sh.events {
			id, err := uuid.NewV7()
			if err != nil {
				return nil, err
			}
			out = append(out, id, "profile.updated", 1, "profiles", "Profile", aggregate(i, k), body, nil)
		}
		return out, nil
	}
	insert := func(table string) func(ctx context.Context, i int) error {
		q := insertRows(table, sh.events)
		return func(ctx context.Context, i int) error {
			a, err := args(i)
			if err != nil {
				return err
			}
			return execTx(ctx, s.db, q, a)
		}
	}
	return []*emitVariant{
		{name: "plain INSERT", run: insert(plainTable)},
		{name: "trigger-numbered INSERT", run: insert(schema.OutboxTable)},
		{name: "Emit", run: func(ctx context.Context, i int) error {
			return s.client.WithTx(ctx, func(tx *testent.Tx) error {
				for k := range sh.events {
					if err := tx.Outbox.EmitProfileUpdated(ctx, aggregate(i, k), payload); err != nil {
						return err
					}
				}
				return nil
			})
		}},
	}
}

// execTx runs one statement in a transaction of its own.
func execTx(ctx context.Context, db *sql.DB, query string, args []any) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, query, args...); err != nil {
		return err
	}
	return tx.Commit()
}

// timeVariants runs each variant n times, interleaved, after a warm-up,
// and records how long each transaction took.
func (e *env) timeVariants(ctx context.Context, variants []*emitVariant, n int, what string) error {
	// Warm the connection and the statement caches before timing.
	for i := range 20 {
		for _, v := range variants {
			if err := v.run(ctx, i); err != nil {
				return fmt.Errorf("emit cost, %s: %w", v.name, err)
			}
		}
	}
	names := make([]string, len(variants))
	for i, v := range variants {
		names[i] = v.name
	}
	e.progress("timing %d transactions of each, %s: %s", n, what, strings.Join(names, ", "))
	for i := range n {
		for k := range variants {
			v := variants[(i+k)%len(variants)] // rotate who goes first
			start := time.Now()
			if err := v.run(ctx, i); err != nil {
				return fmt.Errorf("emit cost, %s: %w", v.name, err)
			}
			v.took = append(v.took, time.Since(start))
		}
	}
	return nil
}

type cost struct{ mean, p50 time.Duration }

func summarizeCost(ds []time.Duration) cost {
	if len(ds) == 0 {
		return cost{}
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	sorted := slices.Sorted(slices.Values(ds))
	return cost{mean: sum / time.Duration(len(ds)), p50: percentile(sorted, 0.5)}
}

func fmtMs(d time.Duration) string {
	return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond))
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
