// Package sqlitetest opens SQLite databases for tests, as the outbox's
// documentation tells users to open theirs (package sqlitedb).
package sqlitetest

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/entoutbox/entoutbox/sqlitedb"
)

// Open opens a new SQLite file of t's own, closed and removed when t ends,
// and returns it with its URL (sqlite:PATH) for commands.
func Open(t testing.TB) (*sql.DB, string) {
	t.Helper()
	url := "sqlite:" + filepath.Join(t.TempDir(), "test.db")
	db, err := sqlitedb.Open(url)
	if err != nil {
		t.Fatalf("sqlitetest: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, url
}
