package outboxtest_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/mysqltest"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/outboxtest"
)

// recorder is a testing.TB whose Fatalf records the failure and stops the
// goroutine, as the real one does.
type recorder struct {
	testing.TB
	failure string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failure = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// failure runs fn with a recorder and returns what it failed with.
func failure(t *testing.T, fn func(tb testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); fn(r) }()
	<-done
	return r.failure
}

// eachDatabase runs test on a client of its own on PostgreSQL, MariaDB and
// SQLite (outboxtest.SQLite): the assertions hold on each.
func eachDatabase(t *testing.T, test func(t *testing.T, client *testent.Client)) {
	for name, open := range map[string]func(t *testing.T) *testent.Client{
		"PostgreSQL": func(t *testing.T) *testent.Client {
			db := pgtest.New(t)
			client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, db.DB)))
			pgtest.Migrate(t, client.Schema.Create)
			return client
		},
		"MariaDB": func(t *testing.T) *testent.Client {
			db, _ := mysqltest.Open(t)
			client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.MySQL, db)))
			require.NoError(t, client.Schema.Create(context.Background()))
			return client
		},
		"SQLite": func(t *testing.T) *testent.Client {
			client := testent.NewClient(testent.Driver(outboxtest.SQLite(t)))
			require.NoError(t, client.Schema.Create(context.Background()))
			return client
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, open(t))
		})
	}
}

// RequireEmitted finds the events of the transaction, and of it alone:
// not those committed before.
func TestRequireEmittedInTheTransaction(t *testing.T) {
	t.Parallel()
	eachDatabase(t, requireEmittedInTheTransaction)
}

func requireEmittedInTheTransaction(t *testing.T, client *testent.Client) {
	ctx := context.Background()
	require.NoError(t, client.WithTx(ctx, func(tx *testent.Tx) error { // another transaction's
		return tx.Outbox.EmitOrderPaid(ctx, "6", testent.OrderPaid{OrderID: 6, AmountCents: 600})
	}))

	tx, err := client.Tx(ctx)
	require.NoError(t, err)
	defer tx.Rollback()
	require.NoError(t, tx.Outbox.EmitOrderPaid(ctx, "7", testent.OrderPaid{OrderID: 7, AmountCents: 700}))

	rows := tx.Outbox.EmittedX(ctx)
	paid := outboxtest.RequireEmitted[testent.OrderPaid](t, rows)
	require.Equal(t, testent.OrderPaid{OrderID: 7, AmountCents: 700, Currency: "EUR"}, paid)
	outboxtest.RequireNotEmitted[testent.ProfileUpdated](t, rows)

	require.Equal(t, `outboxtest: no "profile.updated" event was emitted (1 outbox rows)`,
		failure(t, func(tb testing.TB) { outboxtest.RequireEmitted[testent.ProfileUpdated](tb, rows) }))
	require.Equal(t, `outboxtest: "order.paid" was emitted (event `+rows[0].EventID.String()+`), want none`,
		failure(t, func(tb testing.TB) { outboxtest.RequireNotEmitted[testent.OrderPaid](tb, rows) }))
	require.Equal(t, `outboxtest: "order.paid" event `+rows[0].EventID.String()+` has version 2, testent.OrderPaidV1 is version 1`,
		failure(t, func(tb testing.TB) { outboxtest.RequireEmitted[testent.OrderPaidV1](tb, rows) }))

	require.NoError(t, tx.Outbox.EmitOrderPaid(ctx, "8", testent.OrderPaid{OrderID: 8, AmountCents: 800}))
	rows = tx.Outbox.EmittedX(ctx)
	require.Equal(t, `outboxtest: "order.paid" was emitted 2 times, want once (use RequireEmittedAll for several)`,
		failure(t, func(tb testing.TB) { outboxtest.RequireEmitted[testent.OrderPaid](tb, rows) }))
	all := outboxtest.RequireEmittedAll[testent.OrderPaid](t, rows)
	require.Len(t, all, 2)
	require.ElementsMatch(t, []int64{7, 8}, []int64{all[0].OrderID, all[1].OrderID})
}

func TestMessageCarriesTheOutboxMetadata(t *testing.T) {
	t.Parallel()
	msg := outboxtest.Message(t, testent.OrderPaidV1{OrderID: 1, AmountCents: 5}, "1", events.WithHeader("correlation_id", "c-1"))
	require.Equal(t, "order.paid", msg.Metadata.Get(events.MetaEventName))
	require.Equal(t, "1", msg.Metadata.Get(events.MetaEventVersion))
	require.Equal(t, "1", msg.Metadata.Get(events.MetaAggregateID))
	require.Equal(t, "c-1", msg.Metadata.Get("correlation_id"))
	require.NotEmpty(t, msg.Metadata.Get(events.MetaCreatedAt))
	require.JSONEq(t, `{"order_id": 1, "amount_cents": 5}`, string(msg.Payload))
}
