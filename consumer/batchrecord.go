package consumer

// A batch's dedupe and ordering check in one statement. A batch holds at
// most one run per aggregate (batch.go: an aggregate is in one running
// batch at a time), its events sorted by seq. The statement locks each
// aggregate's position (in key order, so two statements sharing
// aggregates wait on each other rather than deadlock) and applies, per
// aggregate, the events that continue its position without a hole: with
// the position at L, the batch's events after L ranked 1, 2, 3... by seq
// are applied while seq = L + rank. One update moves the position to the
// run's last event, however long the run; an aggregate with no position
// yet gets one at its run's end. An aggregate held behind a dead letter
// applies nothing, and an event in this consumer's dead letters breaks
// its run there. It inserts the dedupe records of the events it applied
// and of those without a seq. An event it does not apply is left to the
// full path, alone, as before. A move of a position an event waits on
// wakes it, on any instance (wake.go).

import (
	"context"
	"fmt"
	"sync"

	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/internal/pgsql"
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
	for i, it := range batch {
		it.res = batchAlone
		seq := it.m.AggregateSeq
		if !ordered(t, it.m) {
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
	}
	var rows entsql.Rows
	err := tx.Query(ctx, recordBatchQuery(t), []any{consumers, idx, topics, types, aggs, seqs, ids, names, recs}, &rows)
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
		case !ordered(t, it.m):
			it.res = batchDuplicate // in the dead letters, or handled before
		case applied:
			return errMovedDuplicate
		}
	}
	return rows.Close()
}

// recordBatchQueries caches recordBatchQuery per tables.
var recordBatchQueries sync.Map // Tables -> string

// recordBatchQuery is recordBatch's statement. Its parameters: one array
// per column of the batch's events (consumer, index, topic, aggregate
// type, aggregate id, seq (0 for none), event id, event name, whether to
// insert the dedupe record); no two events of one aggregate share a seq.
// It returns, per event, whether it was applied (its position moved over
// it, or it has no seq and is not a dead letter) and whether its record is
// new (true when none is made).
func recordBatchQuery(t Tables) string {
	if q, ok := recordBatchQueries.Load(t); ok {
		return q.(string)
	}
	processed, letters := pgsql.QuoteIdent(t.Processed), pgsql.QuoteIdent(t.DeadLetters)
	v := `v AS (SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::uuid[], $8::text[], $9::bool[])
			AS v(consumer, i, topic, aggregate_type, aggregate_id, seq, event_id, event_name, rec)),
		free AS (SELECT * FROM v WHERE NOT EXISTS (SELECT 1 FROM ` + letters + ` d WHERE d.event_id = v.event_id AND d.source = v.consumer)),`
	applied := `applied AS (SELECT i FROM free)`
	if t.Positions != "" {
		positions := pgsql.QuoteIdent(t.Positions)
		same := func(a, b string) string {
			return a + `.consumer = ` + b + `.consumer AND ` + a + `.topic = ` + b + `.topic AND ` +
				a + `.aggregate_type = ` + b + `.aggregate_type AND ` + a + `.aggregate_id = ` + b + `.aggregate_id`
		}
		applied = `keys AS (SELECT DISTINCT consumer, topic, aggregate_type, aggregate_id FROM v WHERE seq > 0),
		locked AS (
			SELECT p.id, p.consumer, p.topic, p.aggregate_type, p.aggregate_id, p.last_seq, p.held_seq FROM ` + positions + ` p
			JOIN keys k ON ` + same("p", "k") + `
			ORDER BY p.consumer, p.topic, p.aggregate_type, p.aggregate_id
			FOR UPDATE OF p),
		run AS (
			SELECT f.i, f.seq, l.id, l.last_seq + row_number() OVER (PARTITION BY l.id ORDER BY f.seq) AS want
			FROM free f JOIN locked l ON ` + same("f", "l") + `
			WHERE f.seq > l.last_seq AND l.held_seq IS NULL),
		moving AS (SELECT i, id, seq FROM run WHERE seq = want),
		moved AS (
			UPDATE ` + positions + ` p SET last_seq = m.top, ` + waitingAfterMove(t, "p", "m.top") + `, updated_at = now()
			FROM (SELECT id, max(seq) AS top FROM moving GROUP BY id) m WHERE p.id = m.id
			RETURNING p.id),
		first AS (
			SELECT f.i, f.consumer, f.topic, f.aggregate_type, f.aggregate_id, f.seq,
				row_number() OVER (PARTITION BY f.consumer, f.topic, f.aggregate_type, f.aggregate_id ORDER BY f.seq) AS want
			FROM free f WHERE f.seq > 0 AND NOT EXISTS (SELECT 1 FROM locked l WHERE ` + same("l", "f") + `)),
		made AS (
			INSERT INTO ` + positions + ` AS p (consumer, topic, aggregate_type, aggregate_id, last_seq, updated_at)
			SELECT consumer, topic, aggregate_type, aggregate_id, max(seq), now() FROM first WHERE seq = want
			GROUP BY consumer, topic, aggregate_type, aggregate_id
			ORDER BY consumer, topic, aggregate_type, aggregate_id
			ON CONFLICT (consumer, topic, aggregate_type, aggregate_id) DO UPDATE
			SET last_seq = excluded.last_seq, ` + waitingAfterMove(t, "p", "excluded.last_seq") + `, updated_at = now()
			WHERE p.last_seq = 0 AND p.held_seq IS NULL
			RETURNING p.consumer, p.topic, p.aggregate_type, p.aggregate_id),
		applied AS (
			SELECT m.i FROM moving m JOIN moved USING (id)
			UNION ALL SELECT f.i FROM made m JOIN first f ON ` + same("f", "m") + ` AND f.seq = f.want
			UNION ALL SELECT i FROM free WHERE seq = 0)`
	}
	q := `WITH ` + v + `
		` + applied + `,
		done AS (
			INSERT INTO ` + processed + ` (consumer, event_id, event_name, attempts)
			SELECT v.consumer, v.event_id, v.event_name, 1 FROM v JOIN applied a ON a.i = v.i WHERE v.rec
			ORDER BY v.consumer, v.event_id
			ON CONFLICT (consumer, event_id) DO NOTHING
			RETURNING consumer, event_id)
		SELECT v.i, a.i IS NOT NULL, NOT v.rec OR EXISTS (SELECT 1 FROM done d WHERE d.consumer = v.consumer AND d.event_id = v.event_id)
		FROM v LEFT JOIN applied a ON a.i = v.i`
	recordBatchQueries.Store(t, q)
	return q
}
