package listen

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

// CheckResult is what the check that notifications arrive found.
type CheckResult int32

const (
	// Unchecked: no check was asked for, or it has not ended yet.
	Unchecked CheckResult = iota
	// Arrive: the check's notification arrived.
	Arrive
	// Lost: it did not, within CheckTimeout; readers find rows by polling.
	Lost
)

// CheckTimeout is how long the check waits for its notification.
const CheckTimeout = 2 * time.Second

// lostLog begins the error logged when the check's notification is lost.
const lostLog = "Notifications sent through the database do not arrive on the LISTEN connection"

// deliveryCheck is the check, on the first LISTEN, that a notification
// sent through the database the rows are written to arrives on the
// listening connection. It does not when that connection goes through a
// pooler in transaction mode (LISTEN lands on a server connection that
// is handed to others), or reaches another server or database than the
// writes: notifications are then lost, and only polling finds the rows.
type deliveryCheck struct {
	channel string  // of this listener alone
	db      *sql.DB // the database the rows are written to; nil: no check
	started atomic.Bool
	heard   chan struct{}
	once    sync.Once
	result  atomic.Int32
}

func newDeliveryCheck(db *sql.DB, channel string) deliveryCheck {
	return deliveryCheck{channel: channel, db: db, heard: make(chan struct{})}
}

// start tells whether the check is to run now: on the first LISTEN only.
func (c *deliveryCheck) start() bool { return c.db != nil && c.started.CompareAndSwap(false, true) }

func (c *deliveryCheck) arrived() { c.once.Do(func() { close(c.heard) }) }

// checkDelivery sends a notification through the database the rows are
// written to and waits up to CheckTimeout for it on the listening
// connection. When it does not come, it says so and what to do: the
// readers find rows by polling meanwhile.
func (l *Listener) checkDelivery(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	if _, err := l.check.db.ExecContext(cctx, `SELECT pg_notify($1, 'check')`, l.check.channel); err != nil {
		if ctx.Err() == nil {
			l.cfg.Logger.Error("Could not check that notifications arrive on the LISTEN connection; relying on polling if they do not",
				err, l.fields(nil))
		}
		return
	}
	select {
	case <-l.check.heard:
		l.check.result.Store(int32(Arrive))
		l.cfg.Logger.Debug("Notifications arrive on the LISTEN connection", l.fields(nil))
	case <-cctx.Done():
		if ctx.Err() != nil {
			return
		}
		l.check.result.Store(int32(Lost))
		l.cfg.Logger.Error(lostLog+": "+l.cfg.CheckAdvice, nil, l.fields(watermill.LogFields{"waited": CheckTimeout.String()}))
	}
}
