package relay_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/testent"
)

// Emit holds a transaction's events and writes them at commit, in emit
// order across topics; Flush writes them earlier, for queries in the
// transaction, and an event given its own id is written at once, after
// those held before it.
func TestEmitWritesTheTransactionsEventsTogetherInOrder(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	tx, err := b.client.Tx(ctx)
	require.NoError(t, err)
	defer tx.Rollback()

	paid := func(n int64) testent.OrderPaid { return testent.OrderPaid{OrderID: n, AmountCents: 100} }
	require.NoError(t, tx.Outbox.EmitOrderPaid(ctx, "a", paid(1)))
	require.NoError(t, tx.Outbox.EmitPriceChanged(ctx, "a", testent.PriceChanged{Sku: "A", Amount: 1, Currency: "EUR"}))
	require.Zero(t, tx.Outbox.Query().CountX(ctx), "held until commit")
	require.NoError(t, tx.Outbox.Flush(ctx))
	require.Equal(t, 2, tx.Outbox.Query().CountX(ctx))

	require.NoError(t, tx.Outbox.EmitOrderPaid(ctx, "a", paid(3)))
	own := uuid.New()
	require.NoError(t, tx.Outbox.EmitOrderPaid(ctx, "a", paid(4), events.WithEventID(own)))
	require.Equal(t, 4, tx.Outbox.Query().CountX(ctx), "an event with its own id is written at once, after the held ones")
	require.ErrorIs(t, tx.Outbox.EmitOrderPaid(ctx, "a", paid(5), events.WithEventID(own)), events.ErrDuplicateEventID)
	require.NoError(t, tx.Outbox.EmitOrderPaid(ctx, "a", paid(6)))
	require.NoError(t, tx.Outbox.EmitPriceChanged(ctx, "a", testent.PriceChanged{Sku: "B", Amount: 1, Currency: "EUR"}))
	require.NoError(t, tx.Outbox.EmitOrderPaid(ctx, "a", paid(8)))
	require.Len(t, tx.Outbox.EmittedX(ctx), 7)
	require.NoError(t, tx.Outbox.EmitOrderPaid(ctx, "a", paid(9)))
	require.NoError(t, tx.Commit())

	var order []string
	for _, r := range b.rows(t) {
		if r.Name == "order.paid" {
			order = append(order, fmt.Sprint(r.Payload["order_id"]))
		} else {
			order = append(order, r.Payload["sku"].(string))
		}
	}
	require.Equal(t, []string{"1", "A", "3", "4", "6", "B", "8", "9"}, order)
}

// A transaction's events are written in statements of at most 1,000 rows
// (PostgreSQL takes at most 65,535 parameters in one), all of them, in
// order: a driver between ent and the database counts the rows of each
// INSERT into the outbox.
func TestEmitManyEventsInOneTransaction(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	inserts := &insertLog{}
	client := testent.NewClient(testent.Driver(insertLogDriver{entsql.OpenDB(dialect.Postgres, b.db.DB), inserts}))
	const n = 2501
	require.NoError(t, client.WithTx(ctx, func(tx *testent.Tx) error {
		for i := range n {
			if err := tx.Outbox.EmitOrderPaid(ctx, "agg", testent.OrderPaid{OrderID: int64(i), AmountCents: 1}); err != nil {
				return err
			}
		}
		return nil
	}))
	require.Equal(t, []int{1000, 1000, 501}, inserts.rowsPerStatement(), "rows of each INSERT into the outbox")
	rows := b.rows(t)
	require.Len(t, rows, n)
	for i, r := range rows {
		require.EqualValues(t, i, r.Payload["order_id"], "row %d out of emit order", i)
	}
}

// insertLogDriver is a driver whose transactions record, in insertLog,
// the rows of each INSERT into outbox_events they run.
type insertLogDriver struct {
	dialect.Driver
	log *insertLog
}

func (d insertLogDriver) Tx(ctx context.Context) (dialect.Tx, error) {
	tx, err := d.Driver.Tx(ctx)
	if err != nil {
		return nil, err
	}
	return insertLogTx{tx, d.log}, nil
}

type insertLogTx struct {
	dialect.Tx
	log *insertLog
}

func (tx insertLogTx) Exec(ctx context.Context, query string, args, v any) error {
	if strings.Contains(query, `INSERT INTO "outbox_events"`) {
		// Each outbox row's payload and headers are "$7::jsonb,$8::jsonb,"
		// in outbox.InsertQuery and InsertNumberedQuery alike (the latter
		// also has a tuple per aggregate counter, without jsonb).
		tx.log.add(strings.Count(query, "::jsonb,$") / 2)
	}
	return tx.Tx.Exec(ctx, query, args, v)
}

type insertLog struct {
	mu   sync.Mutex
	rows []int
}

func (l *insertLog) add(rows int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rows = append(l.rows, rows)
}

func (l *insertLog) rowsPerStatement() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.rows)
}

// When the held events cannot be written at commit, nothing commits: not
// the events, not the business change beside them.
func TestEmitFailingAtCommitCommitsNothing(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	// Every insert into the outbox now fails.
	_, err := b.db.DB.Exec(`ALTER TABLE outbox_events ADD CONSTRAINT no_rows CHECK (false)`)
	require.NoError(t, err)
	err = b.client.WithTx(ctx, func(tx *testent.Tx) error {
		o, err := tx.Order.Create().SetCustomer("carol").SetAmountCents(100).Save(ctx)
		if err != nil {
			return err
		}
		return tx.Outbox.EmitOrderPaid(ctx, fmt.Sprint(o.ID), testent.OrderPaid{OrderID: o.ID, AmountCents: 100})
	})
	require.ErrorContains(t, err, `violates check constraint "no_rows"`)
	require.Zero(t, b.client.Order.Query().CountX(ctx))
	require.Empty(t, b.rows(t))
}

// A NUL character, which jsonb cannot store, is refused at Emit, naming
// the event, rather than failing the commit; a backslash followed by
// "u0000" is only text and goes through.
func TestEmitRefusesNulCharacters(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	ctx := context.Background()
	require.NoError(t, b.client.WithTx(ctx, func(tx *testent.Tx) error {
		err := tx.Outbox.EmitPriceChanged(ctx, "1", testent.PriceChanged{Sku: "A\x00B", Amount: 1, Currency: "EUR"})
		var verr *events.ValidationError
		require.ErrorAs(t, err, &verr)
		require.EqualError(t, err, `events: invalid "price.changed" v3 event: payload holds a NUL character (\u0000), which PostgreSQL's jsonb cannot store`)
		err = tx.Outbox.EmitOrderPaid(ctx, "1", testent.OrderPaid{OrderID: 1, AmountCents: 1}, events.WithHeader("trace", "a\x00b"))
		require.EqualError(t, err, `events: invalid "order.paid" v2 event: header "trace": value holds a NUL character, which PostgreSQL's jsonb cannot store`)
		return tx.Outbox.EmitPriceChanged(ctx, "1", testent.PriceChanged{Sku: `\u0000`, Amount: 1, Currency: "EUR"})
	}))
	rows := b.rows(t)
	require.Len(t, rows, 1)
	require.Equal(t, `\u0000`, rows[0].Payload["sku"])
}
