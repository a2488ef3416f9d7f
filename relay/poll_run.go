package relay

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"reflect"
	"strings"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/relay/internal/pollpath"
	"github.com/google/uuid"
)

// IsSQLite tells whether db is a SQLite database (modernc.org/sqlite or
// mattn/go-sqlite3), by its driver's type: the relay then polls
// (PathPoll).
func IsSQLite(db *sql.DB) bool { return sqliteDB(db) }

func sqliteDB(db *sql.DB) (sqlite bool) {
	if db == nil {
		return false
	}
	defer func() { // a DB not made by sql.Open has no driver to ask
		if recover() != nil {
			sqlite = false
		}
	}()
	return strings.Contains(strings.ToLower(reflect.TypeOf(db.Driver()).String()), "sqlite")
}

// tables are the relay's tables in its database's dialect.
func (c Config) tables() outboxdb.Tables {
	t := outboxdb.New(c.Table, c.DeadLetterTable)
	if sqliteDB(c.DB) {
		t.Dialect = outboxdb.SQLite
	}
	return t
}

// runPoll runs the poll path: SQLite's.
func (r *Relay) runPoll(ctx context.Context) error {
	c := r.cfg
	src := pollpath.New(pollpath.Settings{DB: c.DB, Tables: c.tables(), BatchSize: c.BatchSize,
		PollInterval: c.PollInterval, CloseTimeout: c.CloseTimeout, Attributes: c.CloudEvents.attributes(),
		Logger: c.Logger, Metrics: c.Metrics, RelayID: pollRelayID()})
	e := r.newEngine(c.Concurrency, pollpath.Policy(c.MaxAttempts, c.backoff))
	defer e.Stop(c.CloseTimeout)
	return src.Run(ctx, e)
}

// pollRelayID names this relay in the poll path's lease: host, process and
// a random part (two relays of one process are two).
func pollRelayID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), uuid.NewString()[:8])
}
