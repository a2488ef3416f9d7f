package consumer

// A batch's dedupe and ordering check in one statement, the consumers'
// one rule of order (outboxdb's RecordRunQuery): per aggregate, the
// batch's events that continue its position without a gap are applied and
// the position moves once to the last of them. A batch holds at most one
// run per aggregate (batch.go: an aggregate is in one running batch at a
// time), its events sorted by seq; an event handled alone is a run of one
// (internal/ordering). An event it does not apply is left to the full path, alone.
// A move of a position an event waits on wakes it, on any instance
// (wake.go).

import (
	"context"
	"fmt"

	entsql "entgo.io/ent/dialect/sql"
	"github.com/entoutbox/entoutbox/consumer/internal/ordering"
	"github.com/google/uuid"
)

// recordBatch records the batch's events in tx, setting each one's res:
// batchApplied, batchDuplicate (one without a seq handled before) or
// batchAlone. An event whose position moved while its dedupe record was
// there already fails the batch (errMovedDuplicate).
func recordBatch(ctx context.Context, tx Tx, t Tables, batch []*batchItem) error {
	n := len(batch)
	if n == 0 {
		return nil
	}
	idx := make([]int32, 0, n)
	consumers := make([]string, 0, n)
	topics := make([]string, 0, n)
	types := make([]string, 0, n)
	aggs := make([]string, 0, n)
	seqs := make([]int64, 0, n)
	ids := make([]uuid.UUID, 0, n)
	names := make([]string, 0, n)
	recs := make([]bool, 0, n)
	attempts := make([]int64, 0, n)
	for i, it := range batch {
		it.res = batchAlone
		seq := it.m.AggregateSeq
		if !ordering.Ordered(t, it.m) {
			seq = 0
		}
		idx = append(idx, int32(i))
		consumers = append(consumers, it.m.Consumer)
		topics = append(topics, it.m.Topic)
		types = append(types, it.m.AggregateType)
		aggs = append(aggs, it.m.AggregateID)
		seqs = append(seqs, seq)
		ids = append(ids, it.m.EventID)
		names = append(names, it.m.Name)
		recs = append(recs, it.fn != nil || it.many != nil)
		attempts = append(attempts, 1)
	}
	var rows entsql.Rows
	err := tx.Query(ctx, t.DB().RecordRunQuery(), []any{consumers, idx, topics, types, aggs, seqs, ids, names, recs, attempts}, &rows)
	if err != nil {
		return fmt.Errorf("consumer: recording %d events as processed: %w", n, err)
	}
	defer rows.Close()
	for rows.Next() {
		var i int32
		var applied, fresh bool
		if err := rows.Scan(&i, &applied, &fresh); err != nil {
			return err
		}
		it := batch[i]
		switch {
		case applied && fresh:
			it.res = batchApplied
		case !ordering.Ordered(t, it.m):
			it.res = batchDuplicate // in the dead letters, or handled before
		case applied:
			return errMovedDuplicate
		}
	}
	return rows.Close()
}
