package outboxtest

import (
	"path/filepath"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/entoutbox/entoutbox/sqlitedb"
)

// SQLite opens a SQLite database of t's own, a file in t.TempDir() with the
// settings the outbox rests on (package sqlitedb: modernc.org/sqlite, no
// cgo), as an ent driver, closed when t ends. Code that emits is tested
// there in milliseconds, without a server:
//
//	client := ent.NewClient(ent.Driver(outboxtest.SQLite(t)))
//	require.NoError(t, client.Schema.Create(ctx))
//	tx, _ := client.Tx(ctx)
//	require.NoError(t, orders.Pay(ctx, tx, 42)) // your code, emitting
//	paid := outboxtest.RequireEmitted[ent.OrderPaid](t, tx.Outbox.EmittedX(ctx))
//
// or with ent's enttest: enttest.NewClient(t, enttest.WithOptions(ent.Driver(outboxtest.SQLite(t)))).
// Generated handlers run on it too (handlers.Handle with Message). For the
// relay and the handlers end to end, the Harness runs on SQLite as well:
// New(t, OnSQLite()).
func SQLite(t testing.TB) *entsql.Driver {
	t.Helper()
	db, err := sqlitedb.Open("sqlite:" + filepath.Join(t.TempDir(), "outbox.db"))
	if err != nil {
		t.Fatalf("outboxtest: opening SQLite: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return entsql.OpenDB(dialect.SQLite, db)
}
