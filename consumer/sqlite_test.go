package consumer_test

import (
	"context"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/sqlitetest"
	"github.com/entoutbox/entoutbox/internal/testent"
)

// Generated handlers do not run on SQLite yet: registering one says so,
// naming what does run there, rather than failing later on an SQL error.
func TestHandlersOnSQLiteAreRefusedClearly(t *testing.T) {
	t.Parallel()
	db, _ := sqlitetest.Open(t)
	h := testent.NewOutboxHandlers(testent.NewClient(testent.Driver(entsql.OpenDB(dialect.SQLite, db))))
	err := h.RegisterOrderPaid("billing", func(context.Context, *testent.Tx, *testent.OrderPaid, events.Meta) error { return nil })
	require.EqualError(t, err, `consumer: "billing": handlers run on PostgreSQL only for now, not on sqlite3 `+
		`(there, Emit, outboxtest's RequireEmitted and RequireScheduled, and the relay run)`)
}
