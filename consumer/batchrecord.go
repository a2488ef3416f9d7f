package consumer

// A batch's dedupe and ordering check in one statement per round, instead
// of one per event. A batch (sorted by aggregate and seq) is cut into
// rounds: round 1 holds the first event of each aggregate in the batch,
// round 2 the second, and so on; a backlog of many aggregates is one
// round. Each round's statement does, for all its events at once, what
// recordNext does for one: it moves each aggregate's position from seq-1
// to seq (or makes it at 1) when the aggregate is not held and the event
// is not in this consumer's dead letters, and inserts the dedupe records
// of the events it moved, and of the events without a seq. An event it
// does not move is left to the full path, alone, as before.
//
// Position rows are locked in key order (ORDER BY ... FOR UPDATE), so two
// batches sharing aggregates wait on each other rather than deadlock. A
// move of a position an event waits on wakes it, on any instance
// (wake.go).

import (
	"context"
	"fmt"
	"sync"

	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// roundKey is what two events of one round must not share: their
// consumer's position on their aggregate (an event with a seq), or their
// consumer's record of their event id (one without, which has no position
// to go through). A set's batch mixes its consumer names.
type roundKey struct {
	consumer, topic, aggregateType, aggregateID string
	event                                       uuid.UUID
}

// rounds cuts a sorted batch into rounds, and links each event to the one
// before it of its aggregate (item.prev).
func rounds(t Tables, batch []*batchItem) [][]*batchItem {
	var out [][]*batchItem
	last := make(map[roundKey]*batchItem, len(batch))
	for _, it := range batch {
		k := roundKey{consumer: it.m.Consumer, topic: it.m.Topic, aggregateType: it.m.AggregateType, aggregateID: it.m.AggregateID}
		if !ordered(t, it.m) {
			k = roundKey{consumer: it.m.Consumer, event: it.m.EventID}
		}
		it.prev, it.round = last[k], 0
		if it.prev != nil {
			it.round = it.prev.round + 1
		}
		last[k] = it
		if it.round == len(out) {
			out = append(out, nil)
		}
		out[it.round] = append(out[it.round], it)
	}
	return out
}

// recordRound records the events of one round in tx, setting each one's
// res: batchApplied, batchDuplicate (one without a seq handled before) or
// batchAlone. An event whose position moved while its dedupe record was
// there already fails the batch (errMovedDuplicate).
func recordRound(ctx context.Context, tx Tx, t Tables, round []*batchItem) error {
	n := len(round)
	idx := make([]int32, 0, n)
	consumers := make([]string, 0, n)
	topics := make([]string, 0, n)
	types := make([]string, 0, n)
	aggs := make([]string, 0, n)
	seqs := make([]int64, 0, n)
	ids := make([]uuid.UUID, 0, n)
	names := make([]string, 0, n)
	recs := make([]bool, 0, n)
	byIndex := make([]*batchItem, 0, n)
	for _, it := range round {
		it.res = batchAlone
		if it.prev != nil && it.prev.res != batchApplied {
			continue // its predecessor in the batch was not applied: it cannot be next
		}
		seq := it.m.AggregateSeq
		if !ordered(t, it.m) {
			seq = 0
		}
		idx = append(idx, int32(len(byIndex)))
		consumers = append(consumers, it.m.Consumer)
		byIndex = append(byIndex, it)
		topics = append(topics, it.m.Topic)
		types = append(types, it.m.AggregateType)
		aggs = append(aggs, it.m.AggregateID)
		seqs = append(seqs, seq)
		ids = append(ids, it.m.EventID)
		names = append(names, it.m.Name)
		recs = append(recs, it.fn != nil || it.many != nil)
	}
	if len(byIndex) == 0 {
		return nil
	}
	var rows entsql.Rows
	err := tx.Query(ctx, recordRoundQuery(t), []any{consumers, idx, topics, types, aggs, seqs, ids, names, recs}, &rows)
	if err != nil {
		return fmt.Errorf("consumer: recording %d events as processed: %w", len(byIndex), err)
	}
	defer rows.Close()
	for rows.Next() {
		var i int32
		var applied, fresh bool
		if err := rows.Scan(&i, &applied, &fresh); err != nil {
			return err
		}
		it := byIndex[i]
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

// recordRoundQueries caches recordRoundQuery per tables.
var recordRoundQueries sync.Map // Tables -> string

// recordRoundQuery is recordRound's statement. Its parameters: one
// array per column of the round's events (consumer, index, topic, aggregate type, aggregate id, seq (0 for none), event id, event
// name, whether to insert the dedupe record). It returns, per event,
// whether it was applied (its position moved, or it has no seq and is not
// a dead letter) and whether its record is new (true when none is made).
func recordRoundQuery(t Tables) string {
	if q, ok := recordRoundQueries.Load(t); ok {
		return q.(string)
	}
	processed, letters := pgsql.QuoteIdent(t.Processed), pgsql.QuoteIdent(t.DeadLetters)
	v := `v AS (SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::uuid[], $8::text[], $9::bool[])
			AS v(consumer, i, topic, aggregate_type, aggregate_id, seq, event_id, event_name, rec)),
		free AS (SELECT * FROM v WHERE NOT EXISTS (SELECT 1 FROM ` + letters + ` d WHERE d.event_id = v.event_id AND d.source = v.consumer)),`
	applied := `applied AS (SELECT i FROM free)`
	if t.Positions != "" {
		positions := pgsql.QuoteIdent(t.Positions)
		applied = `locked AS (
			SELECT p.id, f.i, f.seq FROM ` + positions + ` p
			JOIN free f ON p.consumer = f.consumer AND p.topic = f.topic AND p.aggregate_type = f.aggregate_type AND p.aggregate_id = f.aggregate_id
			WHERE f.seq > 1 AND p.last_seq = f.seq - 1 AND p.held_seq IS NULL
			ORDER BY p.consumer, p.topic, p.aggregate_type, p.aggregate_id
			FOR UPDATE OF p),
		moved AS (
			UPDATE ` + positions + ` p SET last_seq = l.seq, ` + waitingAfterMove(t, "p", "l.seq") + `, updated_at = now()
			FROM locked l WHERE p.id = l.id
			RETURNING l.i),
		made AS (
			INSERT INTO ` + positions + ` AS p (consumer, topic, aggregate_type, aggregate_id, last_seq, updated_at)
			SELECT f.consumer, f.topic, f.aggregate_type, f.aggregate_id, 1, now() FROM free f WHERE f.seq = 1
			ORDER BY f.consumer, f.topic, f.aggregate_type, f.aggregate_id
			ON CONFLICT (consumer, topic, aggregate_type, aggregate_id) DO UPDATE
			SET last_seq = 1, ` + waitingAfterMove(t, "p", "1") + `, updated_at = now()
			WHERE p.last_seq = 0 AND p.held_seq IS NULL
			RETURNING p.consumer, p.topic, p.aggregate_type, p.aggregate_id),
		applied AS (
			SELECT i FROM moved
			UNION ALL SELECT f.i FROM made m JOIN free f
				ON f.seq = 1 AND f.consumer = m.consumer AND f.topic = m.topic AND f.aggregate_type = m.aggregate_type AND f.aggregate_id = m.aggregate_id
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
	recordRoundQueries.Store(t, q)
	return q
}
