package relay

import (
	"context"
	"database/sql"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/relay/internal/schedule"
)

// startPromoter runs, until ctx ends, the promoter that moves the due
// scheduled events of tables into the outbox, on every read path: the
// path delivers them from there like any row, never before they are due.
// The channel closes once it has stopped.
func startPromoter(ctx context.Context, db, listen *sql.DB, tables outboxdb.Tables, logger watermill.LoggerAdapter) <-chan struct{} {
	done := make(chan struct{})
	p := schedule.New(schedule.Settings{DB: db, ListenDB: listen, Tables: tables, Logger: logger})
	go func() {
		defer close(done)
		_ = p.Run(ctx) // it logs and retries its failures
	}()
	return done
}

// scheduledTables names the relay's tables for its promoter.
func (c Config) scheduledTables() outboxdb.Tables {
	t := outboxdb.New(c.Table, c.DeadLetterTable)
	t.Scheduled, t.Sequences = c.ScheduledTable, c.SequenceTable
	return t
}

// promoterListenDB is where the relay's promoter LISTENs: the fast path's
// ListenDB when set, none with PollOnly (a pooler in transaction mode: it
// looks every few seconds), DB otherwise.
func (c Config) promoterListenDB() *sql.DB {
	if c.Path == PathFast {
		return c.subscriberConfig().listenDB(c.DB)
	}
	return c.DB
}
