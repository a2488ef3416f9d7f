package relay_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/outbox"
)

// txEnding ends a transaction in one of the ways a caller can, and returns
// it for use afterwards. emitFirst emits an event of aggregate "before"
// in it before it ends, so that its batch exists when it ends.
type txEnding struct {
	name string
	end  func(t *testing.T, client *testent.Client, emitFirst bool) *testent.Tx
}

var txEndings = []txEnding{
	{"after Commit", func(t *testing.T, client *testent.Client, emitFirst bool) *testent.Tx {
		ctx := context.Background()
		tx, err := client.Tx(ctx)
		require.NoError(t, err)
		if emitFirst {
			require.NoError(t, tx.Outbox.EmitOrderPaid(ctx, "before", testent.OrderPaid{OrderID: 1, AmountCents: 1}))
		}
		require.NoError(t, tx.Commit())
		return tx
	}},
	{"after Rollback", func(t *testing.T, client *testent.Client, emitFirst bool) *testent.Tx {
		ctx := context.Background()
		tx, err := client.Tx(ctx)
		require.NoError(t, err)
		if emitFirst {
			require.NoError(t, tx.Outbox.EmitOrderPaid(ctx, "before", testent.OrderPaid{OrderID: 1, AmountCents: 1}))
		}
		require.NoError(t, tx.Rollback())
		return tx
	}},
	{"leaked out of WithTx", func(t *testing.T, client *testent.Client, emitFirst bool) *testent.Tx {
		ctx := context.Background()
		var leaked *testent.Tx
		require.NoError(t, client.WithTx(ctx, func(tx *testent.Tx) error {
			leaked = tx
			if emitFirst {
				return tx.Outbox.EmitOrderPaid(ctx, "before", testent.OrderPaid{OrderID: 1, AmountCents: 1})
			}
			return nil
		}))
		return leaked
	}},
}

// rowsOf counts the events of aggregate agg in the outbox and among the
// scheduled events.
func rowsOf(t *testing.T, b *emitBundle, agg string) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.DB.QueryRow(`SELECT (SELECT count(*) FROM outbox_events WHERE aggregate_id = $1) +
		(SELECT count(*) FROM outbox_scheduled_events WHERE aggregate_id = $1)`, agg).Scan(&n))
	return n
}

func TestEmitOnAnEndedTransactionIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, ending := range txEndings {
		for _, emitFirst := range []bool{false, true} {
			name := ending.name
			if emitFirst {
				name += " that emitted"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				b := setupEmit(t)
				tx := ending.end(t, b.client, emitFirst)

				err := tx.Outbox.EmitOrderPaid(ctx, "late", testent.OrderPaid{OrderID: 2, AmountCents: 2})
				require.ErrorIs(t, err, sql.ErrTxDone)
				require.ErrorIs(t, err, outbox.ErrTxEnded)
				require.EqualError(t, err, "outbox: emitting order.paid: the transaction has already been committed or rolled back")
				// Scheduled, and with its own id (written at once): refused alike.
				err = tx.Outbox.EmitOrderPaid(ctx, "late", testent.OrderPaid{OrderID: 3, AmountCents: 3},
					events.DeliverAfter(time.Hour), events.WithEventID(uuid.New()))
				require.ErrorIs(t, err, sql.ErrTxDone)
				require.ErrorIs(t, tx.Outbox.Flush(ctx), sql.ErrTxDone)

				require.Zero(t, rowsOf(t, b, "late"), "nothing is written")
				// Committing again (what a caller might try) writes nothing either.
				require.Error(t, tx.Commit())
				require.Zero(t, rowsOf(t, b, "late"))
			})
		}
	}
}

func TestCancelOnAnEndedTransactionIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, ending := range txEndings {
		for _, emitFirst := range []bool{false, true} {
			name := ending.name
			if emitFirst {
				name += " that emitted"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				b := setupEmit(t)
				id := uuid.New()
				require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
					return tx.Outbox.EmitOrderPaid(ctx, "waiting", testent.OrderPaid{OrderID: 1, AmountCents: 1},
						events.WithEventID(id), events.DeliverAfter(time.Hour))
				}))
				tx := ending.end(t, b.client, emitFirst)

				res, err := tx.Outbox.Cancel(ctx, id)
				require.ErrorIs(t, err, sql.ErrTxDone)
				require.ErrorIs(t, err, outbox.ErrTxEnded)
				require.EqualError(t, err, "outbox: cancelling event "+id.String()+
					": the transaction has already been committed or rolled back")
				require.Zero(t, res)

				var cancelled bool
				require.NoError(t, b.db.DB.QueryRow(`SELECT cancelled_at IS NOT NULL FROM outbox_scheduled_events
					WHERE event_id = $1`, id).Scan(&cancelled))
				require.False(t, cancelled, "the event still waits for its time")
			})
		}
	}
}

// An event emitted while the transaction commits, after the outbox wrote
// its batch (a commit hook registered after the first emit runs inside
// the outbox's), would be held by a batch that nothing writes again: it
// is refused.
func TestEmitDuringTheCommitIsRefused(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	tx, err := b.client.Tx(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.Outbox.EmitOrderPaid(ctx, "before", testent.OrderPaid{OrderID: 1, AmountCents: 1}))
	var during error
	tx.OnCommit(func(next testent.Committer) testent.Committer {
		return testent.CommitFunc(func(ctx context.Context, tx *testent.Tx) error {
			during = tx.Outbox.EmitOrderPaid(ctx, "late", testent.OrderPaid{OrderID: 2, AmountCents: 2})
			return next.Commit(ctx, tx)
		})
	})
	require.NoError(t, tx.Commit())
	require.ErrorIs(t, during, sql.ErrTxDone)
	require.EqualError(t, during, "outbox: emitting order.paid: the transaction has already been committed or rolled back")
	require.Equal(t, 1, rowsOf(t, b, "before"))
	require.Zero(t, rowsOf(t, b, "late"))
}
