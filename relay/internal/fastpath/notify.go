package fastpath

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/entoutbox/entoutbox/internal/listen"
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

// listenAdvice ends the error logged when notifications do not arrive.
const listenAdvice = "new rows are found by polling only, every poll_interval. Behind a pooler in transaction mode " +
	"(PgBouncer), or when LISTEN reaches another server or database than the writes, set --listen-database-url " +
	"(SubscriberConfig.ListenDB) to a direct connection to the outbox's database"

// shareListener returns the notifier of table's LISTEN connection on
// listen, starting it for the first Subscriber (whose logger and poll
// interval it keeps), and the function that lets go of it: the connection
// closes when the last Subscriber lets go. On its first LISTEN it checks
// that notifications sent through writes arrive.
func shareListener(writes, db *sql.DB, table string, logger watermill.LoggerAdapter, poll time.Duration) (*notifier, func()) {
	l, release := listeners.take(listenKey{writes: writes, listen: db, table: table}, func() *sharedListener {
		ctx, stop := context.WithCancel(context.Background())
		n := &notifier{table: table, l: listen.New(listen.Config{DB: db, Check: writes, CheckAdvice: listenAdvice,
			Channels: []string{notifyChannel(table), rebalanceChannel(table)}, Logger: logger,
			Fields: watermill.LogFields{"poll_interval": poll.String()}})}
		l := &sharedListener{n: n, stop: stop, done: make(chan struct{})}
		go func() {
			defer close(l.done)
			if err := n.l.Run(ctx); errors.Is(err, listen.ErrNotPgx) {
				logger.Error("New rows are found by polling only, every poll_interval", err,
					watermill.LogFields{"poll_interval": poll.String()})
			}
		}()
		return l
	}, func(l *sharedListener) {
		l.stop()
		<-l.done
	})
	return l.n, release
}

// notifier wakes the subscriptions of a table: on each notification of
// its LISTEN connection, and to look once when one may have been missed.
// While the connection is broken, or without one (polling), the
// subscriptions still poll and rebalance on their timers.
type notifier struct {
	table string
	l     *listen.Listener // nil: never woken, it polls
}

// waiter is one subscription's wake-ups.
type waiter struct {
	listen.Wakeups
	rows      <-chan struct{} // rows were committed
	rebalance <-chan struct{} // partitions change hands
}

// pollingNotifier never wakes its subscriptions.
func pollingNotifier() *notifier { return &notifier{} }

func (n *notifier) add() *waiter {
	w := listen.Polling()
	if n.l != nil {
		w = n.l.Wakeups()
	}
	return &waiter{Wakeups: w, rows: w.C(notifyChannel(n.table)), rebalance: w.C(rebalanceChannel(n.table))}
}

func (n *notifier) remove(w *waiter) { w.Close() }

// pid is the listening session's backend, 0 while there is none.
func (n *notifier) pid() uint32 {
	if n.l == nil {
		return 0
	}
	return n.l.PID()
}
