// Package sqlitetest opens SQLite databases for tests, as the outbox's
// documentation tells users to open theirs: modernc.org/sqlite (no cgo),
// with the settings the outbox's guarantees rest on.
package sqlitetest

import (
	"database/sql"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite" // registers "sqlite"
)

// DSN is the data source name of the SQLite file at path: foreign keys on
// (ent's migrations want them), a busy timeout so that a writer waits for
// another's transaction instead of failing with SQLITE_BUSY, and
// transactions that take the write lock when they begin (BEGIN
// IMMEDIATE), so that two never both read and then both wait to write.
func DSN(path string) string {
	return "file:" + path + "?_pragma=foreign_keys(1)&_pragma=busy_timeout(60000)&_pragma=journal_mode(WAL)&_txlock=immediate"
}

// Open opens a new SQLite file of t's own, closed and removed when t ends.
func Open(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", DSN(filepath.Join(t.TempDir(), "test.db")))
	if err != nil {
		t.Fatalf("sqlitetest: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}
