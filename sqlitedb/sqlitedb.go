// Package sqlitedb opens SQLite databases the way the outbox needs them:
// modernc.org/sqlite (no cgo), foreign keys on, writers that wait for
// each other instead of failing, and transactions that take the write
// lock when they begin. On SQLite, Emit, outboxtest's assertions and its
// Harness (outboxtest.OnSQLite), the relay (one at a time,
// relay.PathPoll) and the generated consumers (one process) run.
//
//	db, err := sqlitedb.Open("sqlite:app.db")
//	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.SQLite, db)))
package sqlitedb

import (
	"database/sql"
	"strings"

	_ "modernc.org/sqlite" // registers "sqlite"
)

// DSN is the data source name of the SQLite file at path: foreign keys on
// (ent's migrations want them), WAL journaling (readers do not wait for
// the writer), a busy timeout so that a writer waits for another's
// transaction instead of failing with SQLITE_BUSY, and transactions that
// take the write lock when they begin (BEGIN IMMEDIATE), so that two never
// both read and then both wait to write; times written in the form
// SQLite's date functions read.
func DSN(path string) string {
	return "file:" + path + "?_pragma=foreign_keys(1)&_pragma=busy_timeout(60000)&_pragma=journal_mode(WAL)&_txlock=immediate&_time_format=sqlite"
}

// IsURL tells whether url names a SQLite file: sqlite:PATH (sqlite:///abs
// or sqlite:rel) or file:PATH.
func IsURL(url string) bool {
	return strings.HasPrefix(url, "sqlite:") || strings.HasPrefix(url, "file:")
}

// Path is the file a SQLite URL names.
func Path(url string) string {
	p := strings.TrimPrefix(strings.TrimPrefix(url, "sqlite:"), "file:")
	if strings.HasPrefix(p, "//") { // sqlite:///abs/path, sqlite://rel
		p = strings.TrimPrefix(p, "//")
	}
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	return p
}

// Open opens the SQLite file a URL names (see IsURL), creating it when it
// does not exist.
func Open(url string) (*sql.DB, error) {
	return sql.Open("sqlite", DSN(Path(url)))
}
