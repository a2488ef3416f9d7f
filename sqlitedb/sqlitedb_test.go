package sqlitedb_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/sqlitedb"
)

// The URL forms name their file; other URLs are not SQLite's.
func TestURLs(t *testing.T) {
	for url, path := range map[string]string{
		"sqlite:app.db": "app.db", "sqlite:///var/lib/app.db": "/var/lib/app.db", "sqlite://app.db": "app.db",
		"file:app.db": "app.db", "sqlite:app.db?mode=rwc": "app.db",
	} {
		require.True(t, sqlitedb.IsURL(url), url)
		require.Equal(t, path, sqlitedb.Path(url), url)
	}
	for _, url := range []string{"postgres://u@h/db", "mysql://h/db", "app.db"} {
		require.False(t, sqlitedb.IsURL(url), url)
	}
}

// Open applies the settings the outbox rests on.
func TestOpenSetsWhatTheOutboxNeeds(t *testing.T) {
	db, err := sqlitedb.Open("sqlite:" + filepath.Join(t.TempDir(), "x.db"))
	require.NoError(t, err)
	defer db.Close()
	ctx := context.Background()
	var fk, busy int
	var journal string
	require.NoError(t, db.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk))
	require.NoError(t, db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy))
	require.NoError(t, db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&journal))
	require.Equal(t, 1, fk)
	require.Positive(t, busy)
	require.Equal(t, "wal", journal)
}
