package schedule

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/outbox"
)

// listenHealthy is how long a LISTEN connection must have stayed up, if
// no notification came on it, for the next loss to be a blip of its own
// (the wait before reconnecting starts again from the shortest).
const listenHealthy = 2 * time.Second

// listen holds a connection of ListenDB listening on the scheduled table's
// channel until ctx ends, reconnecting after failures, and wakes the loop
// on each notification (Emit scheduled an event: it may be due sooner than
// the one waited for) and on each new connection (one may have been
// missed meanwhile). Behind a pooler in transaction mode notifications do
// not arrive: the loop still looks every MaxSleep.
func (p *Promoter) listen(ctx context.Context) {
	const first = 100 * time.Millisecond
	for wait := first; ctx.Err() == nil; wait = min(wait*2, p.s.MaxSleep) {
		var heard bool
		healthy := time.NewTimer(listenHealthy) // a timer, not a reading of the clock: see clock_test.go
		err := p.listenOnce(ctx, &heard)
		stayed := false
		select {
		case <-healthy.C:
			stayed = true
		default:
			healthy.Stop()
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errNotPgx) {
			p.s.Logger.Error("Scheduled events are found every max sleep only", err,
				watermill.LogFields{"max_sleep": p.s.MaxSleep.String()})
			return
		}
		if heard || stayed {
			wait = first
		}
		p.s.Logger.Info("LISTEN connection of the scheduled events lost; looking every max sleep until it is back",
			watermill.LogFields{"err": err, "max_sleep": p.s.MaxSleep.String()})
		p.signal()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// listenOnce listens on one connection until it fails; heard tells a
// notification came on it.
func (p *Promoter) listenOnce(ctx context.Context, heard *bool) error {
	conn, err := p.s.ListenDB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errNotPgx
		}
		c := sc.Conn()
		if _, err := c.Exec(ctx, "LISTEN "+pgsql.QuoteIdent(outbox.ScheduledChannel(p.s.Tables.Scheduled))); err != nil {
			return err
		}
		defer func() {
			// Leave the pooled connection clean.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, _ = c.Exec(ctx, "UNLISTEN *")
		}()
		p.signal()
		for {
			if _, err := c.WaitForNotification(ctx); err != nil {
				return err
			}
			*heard = true
			p.signal()
		}
	})
}

// signal wakes the loop, once however many signals come while it works.
func (p *Promoter) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}
