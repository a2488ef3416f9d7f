package main

import (
	"context"
	"os"
	"path/filepath"

	"entgo.io/ent/dialect"

	"github.com/entoutbox/entoutbox/sqlitedb"
)

// The SQLite section (see pollpath.go): a SQLite file of the bench's own
// per measure (package sqlitedb's settings).
var sqlitePoll = pollSection{name: "SQLite", topic: "sqlite", open: newSQLiteFile, retainedRows: sqliteRetainedRows}

// newSQLiteFile is a SQLite outbox of the bench's own, migrated, in a
// directory removed with it.
func newSQLiteFile(ctx context.Context) (*pollDB, error) {
	dir, err := os.MkdirTemp("", "entoutbox-bench-sqlite-")
	if err != nil {
		return nil, err
	}
	d := &pollDB{url: "sqlite:" + filepath.Join(dir, "bench.db"), remove: func() { _ = os.RemoveAll(dir) }}
	if d.db, err = sqlitedb.Open(d.url); err != nil {
		d.remove()
		return nil, err
	}
	if err := d.migrate(ctx, dialect.SQLite, "the SQLite file"); err != nil {
		return nil, err
	}
	return d, nil
}

// sqliteRetainedRows writes ?1 delivered rows, as a relay leaves them.
const sqliteRetainedRows = `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
	INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, delivered_at)
	SELECT printf('00000000-0000-7000-8000-%012d', i), 'profile.updated', 1, 'profiles', 'Profile', i % 1000, '{}',
		strftime('%Y-%m-%d %H:%M:%f', 'now') FROM n`
