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

// bareInsert is the statement relay.SchemaAdapter.InsertQuery builds for
// one message, written out: what an application would run without
// entoutbox to write the same row.
var bareInsert = `INSERT INTO ` + pgsql.QuoteIdent(schema.OutboxTable) +
	` (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers)` +
	` VALUES ($1,$2,$3,$4,$5,$6,$7::jsonb,$8::jsonb) ON CONFLICT (event_id) DO NOTHING`

// bareInsert10 writes ten such rows in one statement.
var bareInsert10 = func() string {
	q := `INSERT INTO ` + pgsql.QuoteIdent(schema.OutboxTable) +
		` (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers) VALUES `
	for k := range 10 {
		if k > 0 {
			q += ","
		}
		n := k * 8
		q += fmt.Sprintf("($%d,$%d,$%d,$%d,$%d,$%d,$%d::jsonb,$%d::jsonb)", n+1, n+2, n+3, n+4, n+5, n+6, n+7, n+8)
	}
	return q + ` ON CONFLICT (event_id) DO NOTHING`
}()

// emitVariant is one way of writing events in a transaction.
type emitVariant struct {
	name string
	run  func(ctx context.Context, i int) error
	took []time.Duration
}

// measureEmitCost times whole transactions (begin to commit) that write
// one row with a bare INSERT, one row with a generated Emit, and ten rows
// with ten Emits, in turn, so that drift on the server (autovacuum,
// checkpoints, a growing table) hits each variant alike.
func measureEmitCost(ctx context.Context, e *env) (string, error) {
	s, err := newSandbox(ctx, e)
	if err != nil {
		return "", err
	}
	defer s.close()
	// The bare INSERT gets the payload already encoded: encoding and
	// validating it is part of what Emit costs.
	body, err := json.Marshal(payload)
	if err != nil {
		return "", fmt.Errorf("encoding the payload: %w", err)
	}
	variants := emitVariants(s, string(body), e.cfg.Aggregates)
	if err := e.timeVariants(ctx, variants); err != nil {
		return "", err
	}
	bare, bare10 := summarizeCost(variants[0].took), summarizeCost(variants[1].took)
	one, ten := summarizeCost(variants[2].took), summarizeCost(variants[3].took)
	return fmt.Sprintf("emit cost (%d tx each, interleaved; mean, p50 in brackets):\n"+
		"  bare INSERT %s/tx (%s); 1 Emit %s/tx (%s) = %.2fx of the bare INSERT\n"+
		"  10 Emits %s/tx (%s) = %.2fx of 1 Emit; the floor, a bare 10-row INSERT, %s/tx (%s) = %.2fx of the bare INSERT",
		e.cfg.EmitTx, fmtMs(bare.mean), fmtMs(bare.p50), fmtMs(one.mean), fmtMs(one.p50), ratio(one.mean, bare.mean),
		fmtMs(ten.mean), fmtMs(ten.p50), ratio(ten.mean, one.mean),
		fmtMs(bare10.mean), fmtMs(bare10.p50), ratio(bare10.mean, bare.mean)), nil
}

// emitVariants are the transactions compared, in the order the report
// reads them: bare INSERT, bare 10-row INSERT, 1 Emit, 10 Emits.
func emitVariants(s *sandbox, body string, aggs int) []*emitVariant {
	// row is the bare INSERT's arguments for the event of aggregate n.
	row := func(n int) ([]any, error) {
		id, err := uuid.NewV7()
		return []any{id, "profile.updated", 1, "profiles", "Profile", aggregateID(n, aggs), body, nil}, err
	}
	return []*emitVariant{
		{name: "bare INSERT", run: func(ctx context.Context, i int) error {
			args, err := row(i)
			if err != nil {
				return err
			}
			return execTx(ctx, s.db, bareInsert, args)
		}},
		// The floor for ten rows: one statement, as Emit's batch writes them.
		{name: "bare 10-row INSERT", run: func(ctx context.Context, i int) error {
			args := make([]any, 0, 80)
			for k := range 10 {
				r, err := row(i*10 + k)
				if err != nil {
					return err
				}
				args = append(args, r...)
			}
			return execTx(ctx, s.db, bareInsert10, args)
		}},
		{name: "1 Emit", run: func(ctx context.Context, i int) error {
			return s.client.WithTx(ctx, func(tx *testent.Tx) error {
				return tx.Outbox.EmitProfileUpdated(ctx, aggregateID(i, aggs), payload)
			})
		}},
		{name: "10 Emits", run: func(ctx context.Context, i int) error {
			return s.client.WithTx(ctx, func(tx *testent.Tx) error {
				for k := range 10 {
					if err := tx.Outbox.EmitProfileUpdated(ctx, aggregateID(i*10+k, aggs), payload); err != nil {
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

// timeVariants runs each variant --emit-tx times, interleaved, after a
// warm-up, and records how long each transaction took.
func (e *env) timeVariants(ctx context.Context, variants []*emitVariant) error {
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
	e.progress("timing %d transactions of each: %s", e.cfg.EmitTx, strings.Join(names, ", "))
	for i := range e.cfg.EmitTx {
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
