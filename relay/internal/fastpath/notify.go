package fastpath

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/outbox"
)

// notifyChannel is the channel Emit notifies at commit (outbox.NotifyChannel).
func notifyChannel(table string) string { return outbox.NotifyChannel(table) }

// rebalanceChannel is the channel on which relays tell each other that
// the partitions of table change hands: one joined, left or gave some
// back. Channel names are identifiers, 63 bytes at most.
func rebalanceChannel(table string) string {
	if name := table + "_rebalance"; len(name) <= 63 {
		return name
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(table))
	return fmt.Sprintf("entoutbox_rebalance_%x", h.Sum64())
}

// listeners holds the LISTEN connection of each table, shared by every
// Subscriber of the process that writes to and listens on the same
// databases: notifications are broadcast, so one connection serves them
// all, and a program with many Subscribers (one per topic, say) does not
// hold one connection each for nothing.
var listeners shared[listenKey, *sharedListener]

type listenKey struct {
	writes, listen *sql.DB
	table          string
}

type sharedListener struct {
	n    *notifier
	stop context.CancelFunc
	done chan struct{}
}

// shareListener returns the notifier of table's LISTEN connection on
// listen, starting it for the first Subscriber (whose logger and poll
// interval it keeps), and the function that lets go of it: the connection
// closes when the last Subscriber lets go.
func shareListener(writes, listen *sql.DB, table string, logger watermill.LoggerAdapter, poll time.Duration) (*notifier, func()) {
	l, release := listeners.take(listenKey{writes: writes, listen: listen, table: table}, func() *sharedListener {
		ctx, stop := context.WithCancel(context.Background())
		l := &sharedListener{n: newNotifier(writes, "entoutbox_check_"+uuid.NewString()[:8]), stop: stop, done: make(chan struct{})}
		go func() {
			defer close(l.done)
			l.n.listen(ctx, listen, table, logger, poll)
		}()
		return l
	}, func(l *sharedListener) {
		l.stop()
		<-l.done
	})
	return l.n, release
}

// notifier holds one connection listening on the table's channels and
// wakes every subscription on each notification. While it is broken the
// subscriptions still poll and rebalance on their timers.
type notifier struct {
	mu      sync.Mutex
	waiters map[*waiter]bool
	pid     atomic.Uint32 // the listening session's backend, 0 while there is none
	check   deliveryCheck
}

// deliveryCheck is the notifier's check, on its first LISTEN, that a
// notification sent through the database the rows are written to arrives
// on the listening connection. It does not when that connection goes
// through a pooler in transaction mode (LISTEN lands on a server
// connection that is handed to others), or reaches another server or
// database than the writes: Emit's notifications are then lost, and only
// polling finds the rows.
type deliveryCheck struct {
	channel string  // of this notifier alone
	db      *sql.DB // the database the rows are written to
	started bool    // the check was sent (only on the first LISTEN)
	heard   chan struct{}
	once    sync.Once
}

// listenCheckTimeout is how long the check waits for its notification.
const listenCheckTimeout = 2 * time.Second

// waiter is one subscription's pair of wake-ups.
type waiter struct {
	rows      chan struct{} // rows were committed
	rebalance chan struct{} // partitions change hands
}

// newNotifier returns a notifier whose delivery check notifies checkChannel
// through writes, the database the rows are written to.
func newNotifier(writes *sql.DB, checkChannel string) *notifier {
	return &notifier{waiters: map[*waiter]bool{},
		check: deliveryCheck{channel: checkChannel, db: writes, heard: make(chan struct{})}}
}

func (n *notifier) add() *waiter {
	w := &waiter{rows: make(chan struct{}, 1), rebalance: make(chan struct{}, 1)}
	n.mu.Lock()
	n.waiters[w] = true
	n.mu.Unlock()
	return w
}

func (n *notifier) remove(w *waiter) {
	n.mu.Lock()
	delete(n.waiters, w)
	n.mu.Unlock()
}

func (n *notifier) wake(rows, rebalance bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for w := range n.waiters {
		if rows {
			signal(w.rows)
		}
		if rebalance {
			signal(w.rebalance)
		}
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// listenHealthy is how long a LISTEN connection must have stayed up, if
// no notification came on it, for the next loss to be a blip of its own.
const listenHealthy = 2 * time.Second

// listen runs on db until ctx ends, reconnecting after failures; after
// the first LISTEN it checks that notifications arrive (deliveryCheck).
// The wait before reconnecting doubles while connections fail at once,
// and starts again from the shortest after one that worked (it stayed up,
// or a notification came on it): otherwise, after a few blips, each loss
// would mean seconds of polling.
func (n *notifier) listen(ctx context.Context, db *sql.DB, table string, logger watermill.LoggerAdapter, poll time.Duration) {
	var checking sync.WaitGroup
	defer checking.Wait()
	check := func() {
		checking.Add(1)
		go func() {
			defer checking.Done()
			n.checkDelivery(ctx, logger, poll)
		}()
	}
	const first = 100 * time.Millisecond
	for backoff := first; ctx.Err() == nil; backoff = min(backoff*2, 5*time.Second) {
		var heard bool
		started := time.Now()
		err := n.listenOnce(ctx, db, table, &heard, check)
		if ctx.Err() != nil {
			return
		}
		if heard || time.Since(started) >= listenHealthy {
			backoff = first
		}
		logger.Info("LISTEN connection lost; polling until it is back", watermill.LogFields{"err": err})
		n.wake(true, true) // something may have been missed meanwhile
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

// listenOnce listens on one connection until it fails; heard tells a
// notification came on it. listening runs once the LISTEN is in place,
// the first time only.
func (n *notifier) listenOnce(ctx context.Context, db *sql.DB, table string, heard *bool, listening func()) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	rows, rebalance := notifyChannel(table), rebalanceChannel(table)
	return conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errors.New("LISTEN needs the pgx database/sql driver")
		}
		c := sc.Conn()
		if _, err := c.Exec(ctx, "LISTEN "+pgsql.QuoteIdent(rows)+"; LISTEN "+pgsql.QuoteIdent(rebalance)+
			"; LISTEN "+pgsql.QuoteIdent(n.check.channel)); err != nil {
			return err
		}
		defer func() {
			// Leave the pooled connection clean.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, _ = c.Exec(ctx, "UNLISTEN *")
		}()
		n.pid.Store(c.PgConn().PID())
		defer n.pid.Store(0)
		n.wake(true, true)
		if !n.check.started {
			n.check.started = true
			listening()
		}
		for {
			note, err := c.WaitForNotification(ctx)
			if err != nil {
				return err
			}
			*heard = true
			if note.Channel == n.check.channel {
				n.check.once.Do(func() { close(n.check.heard) })
				continue
			}
			n.wake(note.Channel == rows, note.Channel == rebalance)
		}
	})
}

// checkDelivery sends a notification through the database the rows are
// written to and waits up to listenCheckTimeout for it on the listening
// connection. When it does not come, it says so and what to do: the
// subscriptions find rows by polling meanwhile, every poll.
func (n *notifier) checkDelivery(ctx context.Context, logger watermill.LoggerAdapter, poll time.Duration) {
	cctx, cancel := context.WithTimeout(ctx, listenCheckTimeout)
	defer cancel()
	if _, err := n.check.db.ExecContext(cctx, `SELECT pg_notify($1, 'check')`, n.check.channel); err != nil {
		if ctx.Err() == nil {
			logger.Error("Could not check that notifications arrive on the LISTEN connection; relying on polling if they do not",
				err, watermill.LogFields{"poll_interval": poll.String()})
		}
		return
	}
	select {
	case <-n.check.heard:
		logger.Debug("Notifications arrive on the LISTEN connection", nil)
	case <-cctx.Done():
		if ctx.Err() != nil {
			return
		}
		logger.Error("Notifications sent through the database do not arrive on the LISTEN connection: new rows are found "+
			"by polling only, every poll_interval. Behind a pooler in transaction mode (PgBouncer), or when LISTEN reaches "+
			"another server or database than the writes, set --listen-database-url (SubscriberConfig.ListenDB) to a direct "+
			"connection to the outbox's database", nil,
			watermill.LogFields{"waited": listenCheckTimeout.String(), "poll_interval": poll.String()})
	}
}
