package relay_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/outboxtest"
)

// numbering is a harness whose consumer "billing" records, per aggregate,
// the events it applied in the order it applied them.
type numbering struct {
	h      *outboxtest.Harness
	client *testent.Client

	mu      sync.Mutex
	applied map[string][]appliedEvent
}

type appliedEvent struct {
	seq int64
	id  uuid.UUID
}

func setupNumbering(t *testing.T) *numbering {
	t.Helper()
	h := outboxtest.New(t, outboxtest.WithTimeout(3*time.Minute))
	n := &numbering{h: h, client: testent.NewClient(testent.Driver(h.Driver())), applied: map[string][]appliedEvent{}}
	h.Migrate(n.client.Schema.Create)
	hs := testent.NewOutboxHandlers(n.client)
	hs.OnOrderPaid("billing", func(ctx context.Context, tx *testent.Tx, e *testent.OrderPaid, m events.Meta) error {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.applied[m.AggregateID] = append(n.applied[m.AggregateID], appliedEvent{m.AggregateSeq, m.EventID})
		return nil
	})
	h.Start(hs)
	return n
}

// emit commits (or rolls back) one Emit on aggregate agg and returns its
// event id.
func (n *numbering) emit(t *testing.T, agg string, commit bool) uuid.UUID {
	id := uuid.New()
	tx, err := n.client.Tx(context.Background())
	require.NoError(t, err)
	require.NoError(t, tx.Outbox.EmitOrderPaid(context.Background(), agg, testent.OrderPaid{OrderID: 1, AmountCents: 100},
		events.WithEventID(id)))
	if commit {
		require.NoError(t, tx.Commit())
	} else {
		require.NoError(t, tx.Rollback())
	}
	return id
}

// insert writes an order.paid event of aggregate agg with a plain INSERT,
// as another service or a backfill would: with aggregate_seq when seq is
// not 0, without it otherwise. It returns the event id.
func (n *numbering) insert(ctx context.Context, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, agg string, seq int64) (uuid.UUID, error) {
	id := uuid.New()
	var s any
	if seq != 0 {
		s = seq
	}
	_, err := db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, event_version, topic,
		aggregate_type, aggregate_id, payload, aggregate_seq)
		VALUES ($1, 'order.paid', 2, 'orders', 'Order', $2, '{"order_id": 1, "amount_cents": 100, "currency": "EUR"}', $3)`,
		id, agg, s)
	return id, err
}

// seqs returns aggregate agg's rows as stored: their numbers in id order,
// and their event ids.
func (n *numbering) seqs(t *testing.T, agg string) ([]int64, []uuid.UUID) {
	t.Helper()
	rs, err := n.h.DB.Query(`SELECT aggregate_seq, event_id FROM outbox_events WHERE aggregate_id = $1 ORDER BY id`, agg)
	require.NoError(t, err)
	defer rs.Close()
	var (
		seqs []int64
		ids  []uuid.UUID
	)
	for rs.Next() {
		var (
			seq sql.NullInt64
			id  uuid.UUID
		)
		require.NoError(t, rs.Scan(&seq, &id))
		require.True(t, seq.Valid, "event %s was written without an aggregate_seq", id)
		seqs, ids = append(seqs, seq.Int64), append(ids, id)
	}
	require.NoError(t, rs.Err())
	return seqs, ids
}

// requireAppliedInOrder waits for the events to settle and checks that
// the consumer applied each of want (by number order) once, in number
// order: none passed over as a duplicate of another with its number.
func (n *numbering) requireAppliedInOrder(t *testing.T, agg string, want []uuid.UUID) {
	t.Helper()
	n.h.Wait()
	n.mu.Lock()
	defer n.mu.Unlock()
	got := n.applied[agg]
	var ids []uuid.UUID
	for i, e := range got {
		require.Equal(t, int64(i+1), e.seq, "the consumer's %d-th event of aggregate %s", i+1, agg)
		ids = append(ids, e.id)
	}
	require.Equal(t, want, ids, "the events the consumer applied, in order")
}

func dense(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i + 1)
	}
	return out
}

// Rows written with a plain INSERT, without aggregate_seq, take their
// numbers from the counters Emit uses, under the same lock: Emits and
// plain INSERTs of one aggregate from several goroutines at once, a
// quarter of each rolled back, number the committed rows 1..N with no gap
// and no duplicate, in id order, and the consumer applies every one of
// them in that order.
func TestPlainInsertsAreNumberedWithEmits(t *testing.T) {
	t.Parallel()
	n := setupNumbering(t)
	ctx := context.Background()
	const workers, perWorker, agg = 6, 24, "7"
	var (
		mu        sync.Mutex
		committed = map[uuid.UUID]bool{}
		wg        sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				commit := (w+i)%4 != 0
				var id uuid.UUID
				if (w+i)%2 == 0 {
					id = n.emit(t, agg, commit)
				} else {
					tx, err := n.h.DB.BeginTx(ctx, nil)
					require.NoError(t, err)
					id, err = n.insert(ctx, tx, agg, 0)
					require.NoError(t, err)
					if commit {
						require.NoError(t, tx.Commit())
					} else {
						require.NoError(t, tx.Rollback())
					}
				}
				if commit {
					mu.Lock()
					committed[id] = true
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()

	seqs, ids := n.seqs(t, agg)
	require.Len(t, ids, len(committed))
	for _, id := range ids {
		require.True(t, committed[id], "event %s was rolled back", id)
	}
	require.Equal(t, dense(len(ids)), seqs, "the numbers of the committed rows, in id order")
	var last int64
	require.NoError(t, n.h.DB.QueryRow(`SELECT last_seq FROM outbox_aggregate_sequences
		WHERE topic = 'orders' AND aggregate_type = 'Order' AND aggregate_id = $1`, agg).Scan(&last))
	require.Equal(t, int64(len(ids)), last, "the counter")
	n.requireAppliedInOrder(t, agg, ids)
}

// A row numbered by hand with the aggregate's next number moves the
// counter, so that the next Emit takes the number after it instead of
// giving the same one again (which the consumer would pass over as a
// duplicate); a number that is not the next one is refused, saying what
// to write; a row without a number that is a duplicate event id skipped by
// ON CONFLICT takes none.
func TestHandNumberedInsertMovesTheCounter(t *testing.T) {
	t.Parallel()
	n := setupNumbering(t)
	ctx := context.Background()
	const agg = "8"
	var want []uuid.UUID
	want = append(want, n.emit(t, agg, true), n.emit(t, agg, true)) // 1, 2

	id, err := n.insert(ctx, n.h.DB, agg, 3) // the next one, by hand
	require.NoError(t, err)
	want = append(want, id)
	want = append(want, n.emit(t, agg, true)) // 4, not 3 again

	// The first event of an aggregate, by hand.
	first, err := n.insert(ctx, n.h.DB, "9", 1)
	require.NoError(t, err)
	second := n.emit(t, "9", true)

	// A duplicate event id skipped by ON CONFLICT takes no number.
	res, err := n.h.DB.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, event_version, topic,
		aggregate_type, aggregate_id, payload) SELECT event_id, event_name, event_version, topic, aggregate_type,
		aggregate_id, payload FROM outbox_events WHERE event_id = $1 ON CONFLICT (event_id) DO NOTHING`, want[0])
	require.NoError(t, err)
	rows, err := res.RowsAffected()
	require.NoError(t, err)
	require.Zero(t, rows)
	id, err = n.insert(ctx, n.h.DB, agg, 0)
	require.NoError(t, err)
	want = append(want, id) // 5

	n.requireAppliedInOrder(t, agg, want)
	n.requireAppliedInOrder(t, "9", []uuid.UUID{first, second})
	seqs, ids := n.seqs(t, agg)
	require.Equal(t, dense(5), seqs)
	require.Equal(t, want, ids)
	seqs, ids = n.seqs(t, "9")
	require.Equal(t, dense(2), seqs)
	require.Equal(t, []uuid.UUID{first, second}, ids)

	for _, seq := range []int64{4, 7} {
		_, err = n.insert(ctx, n.h.DB, "9", seq)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "aggregate_seq %d: %v", seq, err)
		require.Equal(t, "23514", pgErr.Code)
		require.Equal(t, fmt.Sprintf("entoutbox: aggregate_seq %d of aggregate Order/9 on topic orders is not the next number: "+
			"the counter in outbox_aggregate_sequences is at 2", seq), pgErr.Message)
		require.Equal(t, "Leave aggregate_seq out (NULL) and the database numbers the row. A number set by hand must be "+
			"the next one, 3; one at or below the counter writes again an event that has it (as dead-letters retry does).",
			pgErr.Hint)
	}
	_, err = n.insert(ctx, n.h.DB, "10", 2)
	require.ErrorContains(t, err, "aggregate_seq 2 of aggregate Order/10 on topic orders is not the next number: "+
		"the counter in outbox_aggregate_sequences is at 0")
}

// client.Schema.Create installs the trigger once: a second migration
// leaves it as it is, and Schema.WriteTo prints it with the tables.
func TestMigrationInstallsTheNumberingTriggerOnce(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	trigger := func() (oid int64) {
		require.NoError(t, b.db.DB.QueryRow(`SELECT t.oid::bigint FROM pg_trigger t
			WHERE t.tgrelid = 'outbox_events'::regclass AND t.tgname = 'entoutbox_aggregate_seq'`).Scan(&oid))
		return oid
	}
	before := trigger()
	require.NoError(t, b.client.Schema.Create(context.Background()))
	require.Equal(t, before, trigger(), "a second migration made the trigger again")

	var out bytes.Buffer
	require.NoError(t, b.client.Schema.WriteTo(context.Background(), &out))
	require.Contains(t, out.String(), "CREATE TRIGGER %I BEFORE INSERT ON %s FOR EACH ROW")
	require.Contains(t, out.String(), "DO $entoutbox$")
}
