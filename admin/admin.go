package admin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// Tables names the tables an Admin works on, as the relay's
// Config.Table and Config.DeadLetterTable name them. The tables the relay
// names after the outbox table (the WAL path's progress among them) follow
// Outbox.
type Tables struct {
	Outbox      string // the outbox table; schema.OutboxTable when empty
	DeadLetters string // the dead-letter table; schema.DeadLetterTable when empty
	Scheduled   string // the scheduled events' table; schema.ScheduledEventTable when empty
}

// Admin repairs the outbox tables of one database.
type Admin struct {
	db     handle
	begin  func(context.Context) (tx, error)
	tables outboxdb.Tables
}

// handle runs statements outside a transaction: the *sql.DB Open was
// given.
type handle interface {
	outboxdb.Querier
	outboxdb.Execer
}

// tx is a transaction of db.
type tx interface {
	handle
	Commit() error
	Rollback() error
}

// Open returns an Admin working on the tables t names in db (database/sql
// with the pgx driver, or MySQL's: package mysqldb). It reads nothing yet: a table that does not exist
// fails the first call that needs it.
func Open(db *sql.DB, t Tables) (*Admin, error) {
	if db == nil {
		return nil, errors.New("admin: the *sql.DB is nil")
	}
	tables, err := tablesOf(t)
	if err != nil {
		return nil, err
	}
	if tables.Dialect = outboxdb.DialectOfDB(db); tables.Dialect == outboxdb.SQLite {
		return nil, errors.New("admin: the repairs run on PostgreSQL and MySQL; on SQLite not yet")
	}
	return &Admin{db: db, tables: tables,
		begin: func(ctx context.Context) (tx, error) { return db.BeginTx(ctx, nil) }}, nil
}

func tablesOf(t Tables) (outboxdb.Tables, error) {
	tables := outboxdb.New(t.Outbox, t.DeadLetters)
	if t.Scheduled != "" {
		tables.Scheduled = t.Scheduled
	}
	if err := outboxdb.CheckName(tables.Outbox); err != nil {
		return outboxdb.Tables{}, fmt.Errorf("admin: %w", err)
	}
	return tables, nil
}

// inTx runs f in a transaction of its own, committed when f returns no
// error and keep is true after it, rolled back otherwise.
func (a *Admin) inTx(ctx context.Context, f func(tx) (keep bool, err error)) error {
	t, err := a.begin(ctx)
	if err != nil {
		return err
	}
	keep, err := f(t)
	if err != nil || !keep {
		_ = t.Rollback()
		return err
	}
	return t.Commit()
}
