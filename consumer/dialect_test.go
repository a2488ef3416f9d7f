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

// Handlers run on PostgreSQL, MySQL and SQLite; on another database registering
// one says so, rather than failing later on an SQL error.
func TestHandlersOnAnotherDatabaseAreRefusedClearly(t *testing.T) {
	t.Parallel()
	db, _ := sqlitetest.Open(t) // a client that says it is a graph database
	h := testent.NewOutboxHandlers(testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Gremlin, db))))
	err := h.RegisterOrderPaid("billing", func(context.Context, *testent.Tx, *testent.OrderPaid, events.Meta) error { return nil })
	require.EqualError(t, err, `consumer: "billing": handlers run on PostgreSQL, MySQL and SQLite, not on gremlin`)
}
