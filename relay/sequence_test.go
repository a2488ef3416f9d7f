package relay_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
)

// seqRow is an outbox row's place in its aggregate's order.
type seqRow struct {
	id      int64
	eventID uuid.UUID
	topic   string
	agg     string
	seq     int64
}

func (b *emitBundle) seqRows(t *testing.T) []seqRow {
	t.Helper()
	rs, err := b.sql.Query(`SELECT id, event_id, topic, aggregate_id, aggregate_seq FROM outbox_events ORDER BY id`)
	require.NoError(t, err)
	defer rs.Close()
	var out []seqRow
	for rs.Next() {
		var r seqRow
		var seq *int64
		require.NoError(t, rs.Scan(&r.id, &r.eventID, &r.topic, &r.agg, &seq))
		require.NotNil(t, seq, "event %s has no aggregate_seq", r.eventID)
		r.seq = *seq
		out = append(out, r)
	}
	require.NoError(t, rs.Err())
	return out
}

// Emit numbers each aggregate's events on a topic 1, 2, 3... with no gap,
// whatever rolls back, in commit order, and in id order (the relay's order):
// concurrent writers of the same aggregates, several events of one
// aggregate and of several aggregates per transaction, a quarter rolled
// back. On every database.
func TestEmitNumbersEachAggregateDenselyInCommitOrder(t *testing.T) {
	t.Parallel()
	onEveryDatabase(t, emitNumbersEachAggregateDenselyInCommitOrder)
}

func emitNumbersEachAggregateDenselyInCommitOrder(t *testing.T, b *emitBundle) {
	ctx := context.Background()
	const workers, perWorker = 6, 30
	aggs := []string{"a", "b", "c"}
	var (
		mu        sync.Mutex
		committed = map[uuid.UUID]bool{}
		wg        sync.WaitGroup
		errRoll   = errors.New("rolled back on purpose")
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				var ids []uuid.UUID
				rollback := (w+i)%4 == 3
				err := b.client.WithTx(ctx, func(tx *testent.Tx) error {
					// Two events of one aggregate, one of another, and a
					// price change on another topic under the same id.
					for k, agg := range []string{aggs[(w+i)%3], aggs[(w+i)%3], aggs[(w+i+1)%3]} {
						var id uuid.UUID
						if err := tx.Outbox.EmitOrderPaid(ctx, agg, testent.OrderPaid{OrderID: int64(k), AmountCents: 1},
							events.ReturnEventID(&id)); err != nil {
							return err
						}
						ids = append(ids, id)
					}
					var id uuid.UUID
					if err := tx.Outbox.EmitPriceChanged(ctx, aggs[i%3], testent.PriceChanged{Sku: "s", Amount: 1, Currency: "EUR"},
						events.ReturnEventID(&id)); err != nil {
						return err
					}
					ids = append(ids, id)
					if rollback {
						return errRoll
					}
					return nil
				})
				if rollback {
					require.ErrorIs(t, err, errRoll)
					continue
				}
				require.NoError(t, err)
				mu.Lock()
				for _, id := range ids {
					committed[id] = true
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()

	rows := b.seqRows(t)
	require.Len(t, rows, len(committed), "every committed event, nothing rolled back")
	next := map[string]int64{}
	for _, r := range rows {
		require.True(t, committed[r.eventID])
		key := r.topic + "/" + r.agg
		next[key]++
		require.Equal(t, next[key], r.seq, "aggregate %s: in id order the numbers are 1, 2, 3... (row %d)", key, r.id)
	}
	require.Len(t, next, 6, "three aggregates on two topics, each numbered apart")
}

// A transaction holding an aggregate's number makes the aggregate's next
// writer wait until it ends: the numbers follow commit order, and a
// rollback gives its number back. On every database (where one
// transaction writes at a time, every writer waits).
func TestEmitNumberWaitsForTheAggregatesOpenTransaction(t *testing.T) {
	t.Parallel()
	onEveryDatabase(t, emitNumberWaitsForTheAggregatesOpenTransaction)
}

func emitNumberWaitsForTheAggregatesOpenTransaction(t *testing.T, b *emitBundle) {
	ctx := context.Background()
	first, err := b.client.Tx(ctx)
	require.NoError(t, err)
	require.NoError(t, first.Outbox.EmitOrderPaid(ctx, "7", testent.OrderPaid{OrderID: 1, AmountCents: 1}))
	require.NoError(t, first.Outbox.Flush(ctx))

	done := make(chan error, 1)
	go func() {
		done <- b.client.WithTx(ctx, func(tx *testent.Tx) error {
			return tx.Outbox.EmitOrderPaid(ctx, "7", testent.OrderPaid{OrderID: 2, AmountCents: 1})
		})
	}()
	select {
	case err := <-done:
		t.Fatalf("the second writer of aggregate 7 committed (%v) while the first held its number", err)
	case <-time.After(300 * time.Millisecond):
	}
	if !b.oneWriter { // another aggregate does not wait
		require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
			return tx.Outbox.EmitOrderPaid(ctx, "8", testent.OrderPaid{OrderID: 3, AmountCents: 1})
		}))
	}
	require.NoError(t, first.Rollback())
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("the second writer never went on after the first rolled back")
	}
	rows := b.seqRows(t)
	require.Len(t, rows, map[bool]int{false: 2, true: 1}[b.oneWriter])
	for _, r := range rows {
		require.Equal(t, int64(1), r.seq, "aggregate %s: the rolled-back number is given again", r.agg)
	}
}

// A duplicate event id, refused with the transaction still usable, gives
// back the number it took. On every database.
func TestEmitDuplicateGivesBackItsNumber(t *testing.T) {
	t.Parallel()
	onEveryDatabase(t, emitDuplicateGivesBackItsNumber)
}

func emitDuplicateGivesBackItsNumber(t *testing.T, b *emitBundle) {
	ctx := context.Background()
	id := uuid.New()
	require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
		return tx.Outbox.EmitOrderPaid(ctx, "1", testent.OrderPaid{OrderID: 1, AmountCents: 5}, events.WithEventID(id))
	}))
	require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
		err := tx.Outbox.EmitOrderPaid(ctx, "1", testent.OrderPaid{OrderID: 1, AmountCents: 5}, events.WithEventID(id))
		require.ErrorIs(t, err, events.ErrDuplicateEventID)
		return tx.Outbox.EmitOrderPaid(ctx, "1", testent.OrderPaid{OrderID: 2, AmountCents: 5})
	}))
	var seqs []int64
	for _, r := range b.seqRows(t) {
		seqs = append(seqs, r.seq)
	}
	require.Equal(t, []int64{1, 2}, seqs, fmt.Sprintf("no gap after the duplicate: %v", seqs))
}

// Writers of different aggregates do not wait for each other, and none
// fails: on MySQL the counters of aggregates that sort next to each other
// ("2" lies between "199" and "20") share the gaps of their index, where
// an upsert's next-key locks made unrelated writers deadlock. Each writer
// here has aggregates of its own, interleaved in key order with the
// others', some made by the transaction and some moved on.
func TestEmitOnDistinctAggregatesDoesNotDeadlock(t *testing.T) {
	t.Parallel()
	onEveryDatabase(t, func(t *testing.T, b *emitBundle) {
		ctx := context.Background()
		const writers, txs, perTx, pool = 4, 25, 50, 300
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range txs {
					err := b.client.WithTx(ctx, func(tx *testent.Tx) error {
						for k := range perTx {
							agg := strconv.Itoa(w + writers*((i*perTx+k*7)%pool)) // this writer's own
							// An id of its own: each Emit writes at once, in
							// the order of the loop, not batched in key order.
							if err := tx.Outbox.EmitOrderPaid(ctx, agg, testent.OrderPaid{OrderID: int64(k), AmountCents: 1},
								events.WithEventID(uuid.Must(uuid.NewV7()))); err != nil {
								return err
							}
						}
						return nil
					})
					if !assert.NoError(t, err, "writer %d, transaction %d", w, i) {
						return
					}
				}
			}()
		}
		wg.Wait()
		require.Equal(t, writers*txs*perTx, len(b.seqRows(t)), "every event written")
	})
}
