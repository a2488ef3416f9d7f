package fastpath

import (
	"context"
	"database/sql"
	"sync"
)

// Claims run on connections of their own, each set to plan the claim once
// (a generic plan, see claimSession): planning it anew for each claim
// would cost more than running it. Those connections are shared by every
// subscription of the process on one database, a few at most, borrowed
// for one claim at a time: a Subscriber per topic, or many Subscribers, do
// not hold a connection each for claims that take milliseconds.

// claimSession is what a claim connection is set to: generic plans, and
// no JIT (a claim runs in about a millisecond, which compiling it never
// repays; a plan whose estimated cost passed JIT's threshold was compiled
// at every run, 750 ms a claim). Sequential scans stay allowed: disabling
// them added 2 to 3 ms to each claim of a relay that keeps the delivered
// log (commit-to-broker p50 at 500 events/s 1.5 → 4.4 ms), and the claims'
// text keeps them on their indexes without it.
const claimSession = `SELECT set_config('plan_cache_mode', 'force_generic_plan', false), set_config('jit', 'off', false)`

// claimConnsPerDB is how many claims run at once on one database; the
// others wait for a connection to come back.
const claimConnsPerDB = 4

type claimPoolKey struct {
	db     *sql.DB
	pooled bool
}

// claimPool is the claim connections of one database.
type claimPool struct {
	key   claimPoolKey
	slots chan struct{} // one per connection lent or idle
	mu    sync.Mutex
	idle  []*sql.Conn
}

var claimPools shared[claimPoolKey, *claimPool]

// shareClaimPool returns the claim connections of db for a Subscriber, and
// the function that lets go of them: the last Subscriber to let go closes
// them. pooled (PollOnly: behind a pooler in transaction mode) leaves the
// sessions' settings alone, since other clients share them.
func shareClaimPool(db *sql.DB, pooled bool) (*claimPool, func()) {
	k := claimPoolKey{db: db, pooled: pooled}
	return claimPools.take(k, func() *claimPool {
		return &claimPool{key: k, slots: make(chan struct{}, claimConnsPerDB)}
	}, (*claimPool).close)
}

// close ends the idle connections.
func (p *claimPool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, c := range idle {
		p.drop(c)
	}
}

// borrow takes a connection, waiting for one to come back when all are
// lent.
func (p *claimPool) borrow(ctx context.Context) (*sql.Conn, error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	c, err := p.key.db.Conn(ctx)
	if err == nil && !p.key.pooled {
		if _, err = c.ExecContext(ctx, claimSession); err != nil {
			_ = c.Close()
		}
	}
	if err != nil {
		<-p.slots
		return nil, err
	}
	return c, nil
}

// giveBack returns a connection that worked.
func (p *claimPool) giveBack(c *sql.Conn) {
	p.mu.Lock()
	p.idle = append(p.idle, c)
	p.mu.Unlock()
	<-p.slots
}

// drop ends a connection after an error, or when the pool closes: its
// session setting must not go back to the database's pool.
func (p *claimPool) drop(c *sql.Conn) {
	if p.key.pooled {
		_ = c.Close()
	} else {
		discard(c)
	}
}

// claimConn is one subscription's hold on its pool's connections: the one
// lent for the claim under way.
type claimConn struct {
	pool *claimPool
	conn *sql.Conn
}

// get borrows the connection of one claim; put or reset gives it back.
func (c *claimConn) get(ctx context.Context) (*sql.Conn, error) {
	if c.conn != nil {
		return c.conn, nil
	}
	conn, err := c.pool.borrow(ctx)
	if err != nil {
		return nil, err
	}
	c.conn = conn
	return conn, nil
}

// put gives the connection back after a claim; after reset it does
// nothing.
func (c *claimConn) put() {
	if c.conn != nil {
		c.pool.giveBack(c.conn)
		c.conn = nil
	}
}

// reset drops the connection after an error; the next claim borrows
// another.
func (c *claimConn) reset() {
	if c.conn != nil {
		c.pool.drop(c.conn)
		c.conn = nil
		<-c.pool.slots
	}
}
