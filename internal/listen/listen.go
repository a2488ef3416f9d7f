package listen

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/entoutbox/entoutbox/internal/backoff"
)

// ErrNotPgx is Run's answer for a database not opened with the pgx
// database/sql driver: it cannot LISTEN, and is not tried again.
var ErrNotPgx = errors.New("LISTEN needs the pgx database/sql driver")

// Healthy is how long a LISTEN connection must have stayed up, if no
// notification came on it, for the next loss to be a blip of its own:
// the wait before reconnecting starts again from the shortest.
const Healthy = 2 * time.Second

// firstWait is the wait before the first reconnect after a loss.
const firstWait = 100 * time.Millisecond

// Config is what a Listener listens on, and how it logs.
type Config struct {
	// DB is where it listens (the pgx database/sql driver).
	DB *sql.DB
	// Channels are listened on, all on one connection.
	Channels []string
	// OwnConnection opens a connection of its own, made like DB's,
	// instead of holding one of DB's pool (which would starve a small pool).
	OwnConnection bool
	// ApplicationName names its own connection in pg_stat_activity when
	// DB's connections carry no name.
	ApplicationName string
	// Check, when set, is the database the rows are written to: on its
	// first LISTEN the listener checks that a notification sent through
	// it arrives (see CheckResult).
	Check *sql.DB
	// CheckAdvice ends the error logged when the check's notification
	// does not arrive: what to do about it.
	CheckAdvice string
	// MaxWait bounds the wait before reconnecting; 5 s when zero.
	MaxWait time.Duration
	// Lost is the message logged, at info, when the connection is lost.
	Lost string
	// Fields are added to every log entry (poll interval, say).
	Fields watermill.LogFields
	Logger watermill.LoggerAdapter
	// OnNotify, when set, is called with each notification, on the
	// listener's goroutine: it must not block.
	OnNotify func(Notification)
	// OnMissed, when set, is called whenever Missed is signalled.
	OnMissed func()
}

// Notification is one notification on a listened channel.
type Notification struct {
	Channel, Payload string
	// Schema is the listening session's current schema: a channel named
	// after a table alone is shared by the schemas that hold the table.
	Schema string
}

// Listener is one LISTEN connection and its waiters.
type Listener struct {
	cfg   Config
	check deliveryCheck
	pid   atomic.Uint32 // the listening session's backend, 0 while there is none

	mu      sync.Mutex
	waiters map[*waiter]bool

	onWait func(time.Duration) // tests': each wait Run chooses before reconnecting
}

// New returns a listener on cfg; Run runs it.
func New(cfg Config) *Listener {
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = watermill.NopLogger{}
	}
	if cfg.Lost == "" {
		cfg.Lost = "LISTEN connection lost; polling until it is back"
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	return &Listener{cfg: cfg, waiters: map[*waiter]bool{},
		check: newDeliveryCheck(cfg.Check, "entoutbox_check_"+hex.EncodeToString(suffix))}
}

// Wakeups returns a reader's signals, until it closes them.
func (l *Listener) Wakeups() Wakeups {
	w := &waiter{l: l, notes: map[string]chan struct{}{}, missed: make(chan struct{}, 1)}
	for _, ch := range l.cfg.Channels {
		w.notes[ch] = make(chan struct{}, 1)
	}
	l.mu.Lock()
	l.waiters[w] = true
	l.mu.Unlock()
	return w
}

// PID is the listening session's backend, 0 while there is none.
func (l *Listener) PID() uint32 { return l.pid.Load() }

// Listening tells the LISTEN is in place.
func (l *Listener) Listening() bool { return l.PID() != 0 }

// CheckResult is what the check on the first LISTEN found so far.
func (l *Listener) CheckResult() CheckResult { return CheckResult(l.check.result.Load()) }

// Run listens until ctx ends, reconnecting after failures, and returns
// nil then; or ErrNotPgx at once. The wait before reconnecting doubles
// while connections fail at once, and starts again from the shortest
// after one that worked (it stayed up Healthy, or a notification came on
// it): otherwise, after a few blips, each loss would mean seconds of
// polling.
func (l *Listener) Run(ctx context.Context) error {
	var checking sync.WaitGroup
	defer checking.Wait()
	first := func() {
		checking.Add(1)
		go func() {
			defer checking.Done()
			l.checkDelivery(ctx)
		}()
	}
	for attempt := 1; ctx.Err() == nil; attempt++ {
		// A timer, not a reading of the clock: the promoter reads none.
		healthy := time.NewTimer(Healthy)
		heard, err := l.listenOnce(ctx, first)
		stayed := false
		select { // not Stop's answer: since Go 1.23 it is true for a fired timer not yet received from
		case <-healthy.C:
			stayed = true
		default:
			healthy.Stop()
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrNotPgx) {
			return err
		}
		if heard || stayed {
			attempt = 1
		}
		l.cfg.Logger.Info(l.cfg.Lost, l.fields(watermill.LogFields{"err": err}))
		l.missed()
		d := backoff.Exponential(firstWait, l.cfg.MaxWait, attempt)
		if l.onWait != nil {
			l.onWait(d)
		}
		wait := time.NewTimer(d)
		select {
		case <-ctx.Done():
		case <-wait.C:
		}
		wait.Stop()
	}
	return nil
}

// fields are the config's log fields with more.
func (l *Listener) fields(more watermill.LogFields) watermill.LogFields {
	f := watermill.LogFields{"channels": l.cfg.Channels}
	return f.Add(l.cfg.Fields).Add(more)
}

// notified hands n to the waiters of its channel.
func (l *Listener) notified(n Notification) {
	if l.cfg.OnNotify != nil {
		l.cfg.OnNotify(n)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for w := range l.waiters {
		if c, ok := w.notes[n.Channel]; ok {
			signal(c)
		}
	}
}

// missed tells every waiter to look once.
func (l *Listener) missed() {
	if l.cfg.OnMissed != nil {
		l.cfg.OnMissed()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for w := range l.waiters {
		signal(w.missed)
	}
}
