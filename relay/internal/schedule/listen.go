package schedule

import (
	"context"
	"errors"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/entoutbox/entoutbox/internal/listen"
	"github.com/entoutbox/entoutbox/outbox"
)

// listen holds a connection of ListenDB listening on the scheduled table's
// channel until ctx ends, reconnecting after failures, and wakes the loop
// on each notification (Emit scheduled an event: it may be due sooner than
// the one waited for) and whenever one may have been missed (a new
// connection). Behind a pooler in transaction mode notifications do not
// arrive: the loop still looks every MaxSleep.
func (p *Promoter) listen(ctx context.Context) {
	fields := watermill.LogFields{"max_sleep": p.s.MaxSleep.String()}
	l := listen.New(listen.Config{DB: p.s.ListenDB, Channels: []string{outbox.ScheduledChannel(p.s.Tables.Scheduled)},
		MaxWait: p.s.MaxSleep, Logger: p.s.Logger, Fields: fields,
		Lost:     "LISTEN connection of the scheduled events lost; looking every max sleep until it is back",
		OnNotify: func(listen.Notification) { p.signal() }, OnMissed: p.signal})
	if err := l.Run(ctx); errors.Is(err, listen.ErrNotPgx) {
		p.s.Logger.Error("Scheduled events are found every max sleep only", err, fields)
	}
}

// signal wakes the loop, once however many signals come while it works.
func (p *Promoter) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}
