package relay

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// notifyChannel is the LISTEN/NOTIFY channel of an outbox table. Emit
// notifies it in the emitting transaction, so the wake-up is sent when,
// and only if, the transaction commits.
func notifyChannel(table string) string { return table }

// notifier holds one connection listening on the table's channel and wakes
// every subscription on each notification. While it is broken the
// subscriptions still poll.
type notifier struct {
	mu      sync.Mutex
	waiters map[chan struct{}]bool
}

func (n *notifier) add() chan struct{} {
	c := make(chan struct{}, 1)
	n.mu.Lock()
	n.waiters[c] = true
	n.mu.Unlock()
	return c
}

func (n *notifier) remove(c chan struct{}) {
	n.mu.Lock()
	delete(n.waiters, c)
	n.mu.Unlock()
}

func (n *notifier) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for c := range n.waiters {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// listen runs until ctx ends, reconnecting after failures.
func (n *notifier) listen(ctx context.Context, db *sql.DB, channel string, logger watermill.LoggerAdapter) {
	for backoff := 100 * time.Millisecond; ctx.Err() == nil; backoff = min(backoff*2, 5*time.Second) {
		err := n.listenOnce(ctx, db, channel)
		if ctx.Err() != nil {
			return
		}
		logger.Info("LISTEN connection lost; polling until it is back", watermill.LogFields{"err": err})
		n.wakeAll() // something may have been missed meanwhile
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

func (n *notifier) listenOnce(ctx context.Context, db *sql.DB, channel string) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errors.New("LISTEN needs the pgx database/sql driver")
		}
		c := sc.Conn()
		if _, err := c.Exec(ctx, "LISTEN "+pgsql.QuoteIdent(channel)); err != nil {
			return err
		}
		defer func() {
			// Leave the pooled connection clean.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, _ = c.Exec(ctx, "UNLISTEN *")
		}()
		n.wakeAll()
		for {
			if _, err := c.WaitForNotification(ctx); err != nil {
				return err
			}
			n.wakeAll()
		}
	})
}
