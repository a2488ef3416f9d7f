package relay

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/relay/internal/pollpath"
	"github.com/google/uuid"
)

// IsSQLite tells whether db is a SQLite database (modernc.org/sqlite or
// mattn/go-sqlite3), by its driver's type: the relay then polls
// (PathPoll).
func IsSQLite(db *sql.DB) bool { return dialectOf(db) == outboxdb.SQLite }

// IsMySQL tells whether db is a MySQL or MariaDB database
// (github.com/go-sql-driver/mysql), by its driver's type: the relay then
// polls (PathPoll) unless it takes PathCompatible.
func IsMySQL(db *sql.DB) bool { return dialectOf(db) == outboxdb.MySQL }

// dialectOf is db's database, by its driver's type.
func dialectOf(db *sql.DB) outboxdb.Dialect { return outboxdb.DialectOfDB(db) }

// polls tells whether db's database polls by default: it has no LISTEN,
// no snapshot of commit order, no logical replication the fast and WAL
// paths read (MySQL runs the compatible path too).
func polls(db *sql.DB) bool { return dialectOf(db) != outboxdb.Postgres }

// tables are the relay's tables in its database's dialect.
func (c Config) tables() outboxdb.Tables {
	t := outboxdb.New(c.Table, c.DeadLetterTable)
	t.Dialect = dialectOf(c.DB)
	return t
}

// runPoll runs the poll path: SQLite's and MySQL's.
func (r *Relay) runPoll(ctx context.Context) error {
	c := r.cfg
	src := pollpath.New(pollpath.Settings{DB: c.DB, Tables: c.tables(), BatchSize: c.BatchSize,
		PollInterval: c.PollInterval, CloseTimeout: c.CloseTimeout, Attributes: attributes(c.Tenant, c.CloudEvents),
		Logger: c.Logger, Metrics: c.Metrics, RelayID: pollRelayID(), Partitions: pollPartitions(c.DB)})
	e := r.newEngine(c.Concurrency, pollpath.Policy(c.MaxAttempts, c.backoff))
	defer e.Stop(c.CloseTimeout)
	return src.Run(ctx, e)
}

// pollPartitionCount is how many partitions divide the outbox's rows between
// the relays that share it on MySQL: as many relays as this relay at
// once, each with its share. SQLite's relays take turns instead.
const pollPartitionCount = 32

// pollPartitions is the poll path's partitions on db's database: one
// (the whole outbox) on SQLite.
func pollPartitions(db *sql.DB) int {
	if dialectOf(db) == outboxdb.MySQL {
		return pollPartitionCount
	}
	return 1
}

// pollRelayID names this relay in the poll path's lease: host, process and
// a random part (two relays of one process are two).
func pollRelayID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), uuid.NewString()[:8])
}
