package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// A subscription proves to the other relays that it is alive by holding a
// session-level advisory lock, on a connection of its own, for as long as it
// runs. PostgreSQL releases the lock the moment that session ends: the
// process died or was killed, or its connection was cut. The others then
// take its partitions within deadGrace instead of waiting for its lease. A
// relay that is merely slow or paused keeps its session, and its lease
// rules as before. The lock's key is outboxdb.LiveKey; status reads it
// through outboxdb.LiveHeld.

const (
	// liveCheckEvery is how often a subscription checks that its session
	// still holds the lock; it stops sending as soon as it does not.
	liveCheckEvery = 200 * time.Millisecond
	// liveStale is how old its last successful check may be for it to send.
	liveStale = 4 * liveCheckEvery
	// deadGrace is how long a holder must have been seen without its lock
	// before the others take its partitions: far longer than the holder
	// takes to notice it lost the lock and stop sending.
	deadGrace = 2 * time.Second
)

// errLiveLockTaken is ensure's error when another session holds the lock:
// the subscription's own earlier session, cut off from it but not yet
// noticed by the server. The subscription then takes a new name.
var errLiveLockTaken = errors.New("the liveness lock is held by another session")

// liveness is a subscription's lock of life. Disabled behind a pooler in
// transaction mode (PollOnly), where a session lock would stay on a server
// connection that others share: the subscription is then taken over by
// lease only, as the others know from its membership row.
type liveness struct {
	db       *sql.DB
	table    string
	holder   string
	disabled bool
	hook     func(context.Context) error // tests only: runs first in each check (see testHooks)

	mu     sync.Mutex
	conn   *sql.Conn
	lastOK time.Time
	stop   context.CancelFunc
	done   chan struct{}
	lost   chan struct{} // closed when the session holding the lock is gone
}

func newLiveness(db *sql.DB, table, holder string, disabled bool) *liveness {
	return &liveness{db: db, table: table, holder: holder, disabled: disabled}
}

// ensure takes the lock if it is not held and reports whether it is.
func (l *liveness) ensure(ctx context.Context) error {
	if l.disabled {
		return nil
	}
	l.mu.Lock()
	held := l.conn != nil
	l.mu.Unlock()
	if held {
		return nil
	}
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("opening the liveness connection: %w", err)
	}
	var got bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock(`+outboxdb.LiveKey(l.table, "$1")+`)`, l.holder).Scan(&got); err != nil {
		discard(conn)
		return fmt.Errorf("taking the liveness lock: %w", err)
	}
	if !got {
		discard(conn)
		return fmt.Errorf("%w: %s", errLiveLockTaken, l.holder)
	}
	wctx, stop := context.WithCancel(context.Background())
	l.mu.Lock()
	l.conn, l.lastOK, l.stop = conn, time.Now(), stop
	l.done, l.lost = make(chan struct{}), make(chan struct{})
	done, lost := l.done, l.lost
	l.mu.Unlock()
	go l.watch(wctx, conn, done, lost)
	return nil
}

// watch checks the session every liveCheckEvery until it fails or stop.
func (l *liveness) watch(ctx context.Context, conn *sql.Conn, done, lost chan struct{}) {
	defer close(done)
	t := time.NewTicker(liveCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, liveStale)
		var err error
		if l.hook != nil {
			err = l.hook(cctx)
		}
		if err == nil {
			_, err = conn.ExecContext(cctx, `SELECT 1`)
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			l.mu.Lock()
			if l.conn == conn {
				l.conn = nil
			}
			l.mu.Unlock()
			discard(conn) // the lock, if somehow still held, goes with the session
			close(lost)
			return
		}
		l.mu.Lock()
		l.lastOK = time.Now()
		l.mu.Unlock()
	}
}

// ok tells whether the lock was confirmed held lately.
func (l *liveness) ok() bool {
	if l.disabled {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conn != nil && time.Since(l.lastOK) < liveStale
}

// lostC is closed when the session holding the lock is gone; nil before
// the lock is first taken.
func (l *liveness) lostC() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// forget drops a lock whose session is gone, so that ensure takes it anew.
func (l *liveness) forget() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.conn, l.lost = nil, nil
}

// release ends the session holding the lock.
func (l *liveness) release() {
	l.mu.Lock()
	conn, stop, done := l.conn, l.stop, l.done
	l.conn = nil
	l.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	if conn != nil {
		discard(conn)
	}
}

// discard closes conn's session instead of returning it to the pool, where
// a session lock would outlive the subscription.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(dc any) error {
		if c, ok := dc.(*stdlib.Conn); ok {
			return c.Close()
		}
		return errors.New("not a pgx connection")
	})
	_ = conn.Close()
}

// deadHolders remembers when each holder was first seen without its lock.
type deadHolders struct {
	seen map[string]time.Time
}

// confirm records the holders seen dead now and returns those seen dead
// for at least deadGrace; the others are forgotten.
func (d *deadHolders) confirm(now time.Time, dead []string) []string {
	if d.seen == nil {
		d.seen = map[string]time.Time{}
	}
	still := make(map[string]bool, len(dead))
	var out []string
	for _, h := range dead {
		still[h] = true
		first, ok := d.seen[h]
		if !ok {
			d.seen[h] = now
		} else if now.Sub(first) >= deadGrace {
			out = append(out, h)
		}
	}
	for h := range d.seen {
		if !still[h] {
			delete(d.seen, h)
		}
	}
	return out
}
