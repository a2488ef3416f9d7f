package pollpath

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// The leases: held leaseFor, renewed every leaseRenew; a relay that holds
// none tries to take one every leaseRetry.
const (
	leaseFor   = 2 * time.Second
	leaseRenew = 500 * time.Millisecond
	leaseRetry = 250 * time.Millisecond
)

// A leaser holds what a relay may relay of the outbox: the whole of it
// (SQLite: one relay at a time) or partitions of it (MySQL: relays share
// it). A term of the relay runs while what it holds does not change for
// the worse: rows taken in a term are published only in that term.
type leaser interface {
	// create makes the lease's tables.
	create(ctx context.Context) error
	// acquire renews what the relay holds and takes what it may: true
	// when it then holds something.
	acquire(ctx context.Context) (bool, error)
	// renew renews what the relay holds, and takes its share where it
	// holds less: false when the term must end (it lost some of it, or
	// holds more than its share and gives some back between terms).
	renew(ctx context.Context) (bool, error)
	// handBack gives back what the relay holds beyond its share: between
	// terms, nothing of it in flight.
	handBack(ctx context.Context) error
	// release gives all up: the relay stops.
	release(ctx context.Context)
	// filter is the read's arguments beyond the cursor and the page size,
	// and its statement: none when the relay holds the whole outbox.
	filter() (*outboxdb.Statement, []any)
	// describe is what it holds, for the logs.
	describe() map[string]any
}

// leaseClock is until when what a relay holds certainly runs, by this
// process's clock: from the start of the write that took or renewed it.
// A write that stalls (a long transaction holding a lock) stops the
// publishes when the lease may have run out, before another relay can
// have taken it.
type leaseClock struct{ until atomic.Int64 }

func (c *leaseClock) renewed(began time.Time) { c.until.Store(began.Add(leaseFor).UnixNano()) }

// runs tells whether the lease certainly still runs.
func (c *leaseClock) runs() bool { return time.Now().UnixNano() < c.until.Load() }

// wholeLease is SQLite's: one row, the relay that relays the outbox now
// and until when.
type wholeLease struct {
	db     outboxdb.SQLQuerier
	tables outboxdb.Tables
	relay  string
	clock  *leaseClock
}

func (l *wholeLease) create(ctx context.Context) error {
	if _, err := l.db.ExecContext(ctx, outboxdb.PollLeaseCreate.SQL(l.tables)); err != nil {
		return fmt.Errorf("relay: creating the lease table %q: %w", l.tables.PollLease(), err)
	}
	return nil
}

func (l *wholeLease) acquire(ctx context.Context) (bool, error) { return l.take(ctx) }

func (l *wholeLease) renew(ctx context.Context) (bool, error) { return l.take(ctx) }

// take takes or renews the lease.
func (l *wholeLease) take(ctx context.Context) (bool, error) {
	began := time.Now()
	res, err := l.db.ExecContext(ctx, outboxdb.PollLeaseTake.SQL(l.tables), l.relay, leaseFor.Milliseconds())
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil || n == 0 {
		return false, err
	}
	l.clock.renewed(began)
	return true, nil
}

func (l *wholeLease) handBack(context.Context) error { return nil }

func (l *wholeLease) release(ctx context.Context) {
	_, _ = l.db.ExecContext(ctx, outboxdb.PollLeaseRelease.SQL(l.tables), l.relay)
}

func (l *wholeLease) filter() (*outboxdb.Statement, []any) { return outboxdb.PollPending, nil }

func (l *wholeLease) describe() map[string]any {
	return map[string]any{"lease_table": l.tables.PollLease()}
}
