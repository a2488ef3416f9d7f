package batching

// A batch's dedupe and ordering check in one statement, the consumers'
// one rule of order (outboxdb's RecordRunQuery): per aggregate, the
// batch's events that continue its position without a gap are applied and
// the position moves once to the last of them. A batch holds at most one
// run per aggregate (batch.go: an aggregate is in one running batch at a
// time), its events sorted by seq; an event handled alone is a run of one
// (package ordering). An event it does not apply is left to the full path,
// alone.
// A move of a position an event waits on wakes it, on any instance
// (the consumer package's wake.go).

import (
	"context"
	"fmt"

	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/consumer/internal/ordering"
)

// record records the batch's events in tx, setting each one's res:
// Applied, Duplicate (one without a seq handled before) or
// Alone. An event whose position moved while its dedupe record was
// there already fails the batch (errMovedDuplicate).
func record(ctx context.Context, tx Tx, t ordering.Tables, batch []*Item) error {
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
		it.res = Alone
		seq := it.Meta.AggregateSeq
		if !ordering.Ordered(t, it.Meta) {
			seq = 0
		}
		idx = append(idx, int32(i))
		consumers = append(consumers, it.Meta.Consumer)
		topics = append(topics, it.Meta.Topic)
		types = append(types, it.Meta.AggregateType)
		aggs = append(aggs, it.Meta.AggregateID)
		seqs = append(seqs, seq)
		ids = append(ids, it.Meta.EventID)
		names = append(names, it.Meta.Name)
		recs = append(recs, it.Fn != nil || it.Many != nil)
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
			it.res = Applied
		case !ordering.Ordered(t, it.Meta):
			it.res = Duplicate // in the dead letters, or handled before
		case applied:
			return errMovedDuplicate
		}
	}
	return rows.Close()
}
