package fastpath

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
// session-level advisory lock for as long as it runs. PostgreSQL releases
// the lock the moment that session ends: the process died or was killed,
// or its connection was cut. The others then take its partitions within
// deadGrace instead of waiting for its lease. A relay that is merely slow
// or paused keeps its session, and its lease rules as before. The lock's
// key is outboxdb.LiveKey; status reads it through outboxdb.LiveHeld.
//
// The locks of all the subscriptions of one Subscriber are held on one
// session (liveSession): one connection however many topics it reads, so
// that a Subscriber per topic does not cost a connection per topic. Losing
// that session loses every lock on it, and each subscription gives its
// partitions up and joins again, as it would alone.

const (
	// liveCheckEvery is how often a subscription checks that its session
	// still holds the lock; it stops sending as soon as it does not.
	liveCheckEvery = 200 * time.Millisecond
	// LiveStale is how old its last successful check may be for it to send.
	LiveStale = 4 * liveCheckEvery
	// deadGrace is how long a holder must have been seen without its lock
	// before the others take its partitions: far longer than the holder
	// takes to notice it lost the lock and stop sending.
	deadGrace = 2 * time.Second
)

// errLiveLockTaken is ensure's error when another session holds the lock:
// the subscription's own earlier session, cut off from it but not yet
// noticed by the server. The subscription then takes a new name.
var errLiveLockTaken = errors.New("the liveness lock is held by another session")

// liveSession is the session on which a Subscriber holds its
// subscriptions' liveness locks. Disabled behind a pooler in transaction
// mode (PollOnly), where a session lock would stay on a server connection
// that others share: the subscriptions are then taken over by lease only,
// as the others know from their membership rows.
type liveSession struct {
	db       *sql.DB
	table    string
	disabled bool
	hooks    *Hooks // its Subscriber's: liveCheck runs first in each check (tests only)

	// opening serializes the opening of the connection and the taking and
	// giving back of locks on it.
	opening sync.Mutex

	mu  sync.Mutex
	gen *liveGen // the connection now, nil while there is none
}

// liveGen is one connection of a liveSession, from its opening to its end.
type liveGen struct {
	conn    *sql.Conn
	holders map[string]bool // whose lock it holds
	lastOK  time.Time       // of its last successful check (under liveSession.mu)
	stop    context.CancelFunc
	done    chan struct{} // closed when its watch has ended
	lost    chan struct{} // closed when the session is gone
	ended   bool          // lost or closed: no lock is taken on it any more
}

func newLiveSession(db *sql.DB, table string, disabled bool, hooks *Hooks) *liveSession {
	return &liveSession{db: db, table: table, disabled: disabled, hooks: hooks}
}

// liveness is one subscription's lock of life, on its Subscriber's session.
type liveness struct {
	s      *liveSession
	holder string
	gen    *liveGen // the connection its lock is held on; nil when not (under s.mu)
}

func (s *liveSession) forHolder(holder string) *liveness { return &liveness{s: s, holder: holder} }

// ensure takes the lock if it is not held and reports whether it is.
func (l *liveness) ensure(ctx context.Context) error {
	s := l.s
	if s.disabled {
		return nil
	}
	s.opening.Lock()
	defer s.opening.Unlock()
	s.mu.Lock()
	gen := s.gen
	held := l.gen != nil && l.gen == gen && !gen.ended
	s.mu.Unlock()
	if held {
		return nil
	}
	if gen == nil {
		var err error
		if gen, err = s.open(ctx); err != nil {
			return err
		}
	}
	var got bool
	if err := gen.conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock(`+outboxdb.LiveKey(s.table, "$1")+`)`, l.holder).Scan(&got); err != nil {
		// The session is in doubt, and so is the lock: cut off mid-statement,
		// it may have been granted without this side knowing. Ending the
		// session ends every lock on it; the next ensure opens another.
		s.end(gen)
		return fmt.Errorf("taking the liveness lock: %w", err)
	}
	if !got {
		return fmt.Errorf("%w: %s", errLiveLockTaken, l.holder)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen.ended {
		return errors.New("taking the liveness lock: its session ended meanwhile")
	}
	gen.holders[l.holder] = true
	l.gen = gen
	return nil
}

// open starts a connection and its watch; under s.opening.
func (s *liveSession) open(ctx context.Context) (*liveGen, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("opening the liveness connection: %w", err)
	}
	wctx, stop := context.WithCancel(context.Background())
	gen := &liveGen{conn: conn, holders: map[string]bool{}, lastOK: time.Now(), stop: stop,
		done: make(chan struct{}), lost: make(chan struct{})}
	s.mu.Lock()
	s.gen = gen
	s.mu.Unlock()
	go s.watch(wctx, gen)
	return gen, nil
}

// watch checks the session every liveCheckEvery until it fails or stops.
func (s *liveSession) watch(ctx context.Context, gen *liveGen) {
	defer close(gen.done)
	t := time.NewTicker(liveCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, LiveStale)
		var err error
		if s.hooks.LiveCheck != nil {
			err = s.hooks.LiveCheck(cctx)
		}
		if err == nil {
			_, err = gen.conn.ExecContext(cctx, `SELECT 1`)
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			go s.end(gen) // end waits for this watch to return
			return
		}
		s.mu.Lock()
		gen.lastOK = time.Now()
		s.mu.Unlock()
	}
}

// end ends gen's session, and with it every lock held on it; the
// subscriptions that held one see lost closed. The next ensure opens
// another.
func (s *liveSession) end(gen *liveGen) {
	s.mu.Lock()
	if gen.ended {
		s.mu.Unlock()
		return
	}
	gen.ended = true
	if s.gen == gen {
		s.gen = nil
	}
	s.mu.Unlock()
	gen.stop()
	<-gen.done
	discard(gen.conn) // the locks, if somehow still held, go with the session
	close(gen.lost)
}

// ok tells whether the lock was confirmed held lately.
func (l *liveness) ok() bool {
	if l.s.disabled {
		return true
	}
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.gen != nil && !l.gen.ended && time.Since(l.gen.lastOK) < LiveStale
}

// lostC is closed when the session holding the lock is gone; nil while the
// lock is not held.
func (l *liveness) lostC() <-chan struct{} {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.gen == nil {
		return nil
	}
	return l.gen.lost
}

// forget drops a lock whose session is gone, so that ensure takes it anew.
func (l *liveness) forget() {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	l.gen = nil
}

// release gives the lock back. The session ends with the last lock on it.
func (l *liveness) release() {
	s := l.s
	s.opening.Lock()
	defer s.opening.Unlock()
	s.mu.Lock()
	gen := l.gen
	l.gen = nil
	if gen == nil || gen.ended {
		s.mu.Unlock()
		return
	}
	delete(gen.holders, l.holder)
	last := len(gen.holders) == 0
	s.mu.Unlock()
	if last {
		s.end(gen)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), LiveStale)
	defer cancel()
	if _, err := gen.conn.ExecContext(ctx, `SELECT pg_advisory_unlock(`+outboxdb.LiveKey(s.table, "$1")+`)`, l.holder); err != nil {
		s.end(gen) // the lock must not outlive the subscription
	}
}

// close ends the session, whatever locks are still on it.
func (s *liveSession) close() {
	s.mu.Lock()
	gen := s.gen
	s.mu.Unlock()
	if gen != nil {
		s.end(gen)
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
