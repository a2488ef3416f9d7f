package relay

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/metrics"
	"github.com/entoutbox/entoutbox/relay/internal/schedule"
)

// sharePromoter runs the promoter that moves the due scheduled events of
// tables into the outbox, on every read path (the path delivers them from
// there like any row, never before they are due), and returns the
// function that lets go of it. The relays and Subscribers of a process
// that share the databases and tables share one promoter (whose logger is
// the first one's): another would hold a LISTEN connection for nothing,
// and only one promotion runs at a time anyway. It stops when the last
// lets go. batch bounds a promotion; zero for the default. m (the first
// one's; nil for none) counts the events moved and the failures.
func sharePromoter(db, listen *sql.DB, tables outboxdb.Tables, logger watermill.LoggerAdapter, m *metrics.Metrics, batch int) (release func()) {
	key := promoterKey{db: db, listen: listen, tables: tables}
	promoters.Lock()
	defer promoters.Unlock()
	p, ok := promoters.m[key]
	if !ok {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		var maxSleep time.Duration
		if tables.Dialect == outboxdb.SQLite {
			// No notification tells of an event scheduled sooner: look
			// every second (a read of a local file).
			maxSleep = sqlitePromoteSleep
		}
		run := schedule.New(schedule.Settings{DB: db, ListenDB: listen, Tables: tables, Logger: logger,
			BatchSize: batch, MaxSleep: maxSleep, Metrics: schedule.Metrics{
				Promoted: m.ScheduledPromoted,
				Failed:   func(error) { m.ScheduledPromoteFailed() },
			}})
		go func() {
			defer close(done)
			_ = run.Run(ctx) // it logs and retries its failures
		}()
		p = &sharedPromoter{stop: func() { cancel(); <-done }}
		promoters.m[key] = p
	}
	p.users++
	var once sync.Once
	return func() {
		once.Do(func() {
			promoters.Lock()
			p.users--
			last := p.users == 0
			if last {
				delete(promoters.m, key)
			}
			promoters.Unlock()
			if last {
				p.stop()
			}
		})
	}
}

// sqlitePromoteSleep bounds how late a scheduled event is moved on SQLite.
const sqlitePromoteSleep = time.Second

// promoters are the promoters running in the process.
var promoters = struct {
	sync.Mutex
	m map[promoterKey]*sharedPromoter
}{m: map[promoterKey]*sharedPromoter{}}

type promoterKey struct {
	db, listen *sql.DB
	tables     outboxdb.Tables
}

type sharedPromoter struct {
	users int
	stop  func()
}

// scheduledTables names the relay's tables for its promoter.
func (c Config) scheduledTables() outboxdb.Tables {
	t := c.tables()
	t.Scheduled, t.Sequences = c.ScheduledTable, c.SequenceTable
	return t
}

// promoterListenDB is where the relay's promoter LISTENs: the fast path's
// ListenDB when set, none with PollOnly (a pooler in transaction mode: it
// looks every few seconds), DB otherwise.
func (c Config) promoterListenDB() *sql.DB {
	if polls(c.DB) { // SQLite and MySQL: no LISTEN
		return nil
	}
	if c.Path == PathFast {
		return c.subscriberConfig().listenDB(c.DB)
	}
	return c.DB
}
