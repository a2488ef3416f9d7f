package consumer

// Outages: a delivery that fails because the consumer's database cannot
// be reached is not the event's failure. It burns no attempt and writes
// no dead letter: the instance pauses (one breaker per handler set, for
// all its consumer names and subscriptions), says so once, probes the
// database with a backoff until it answers, says so once, and resumes.
// Meanwhile its deliveries wait, up to outageHold each, and are then
// nacked for the broker to deliver again (to an instance that may reach
// the database, if this one alone cannot).
//
// An error is an outage when its chain says the connection failed (pgx's
// connect errors, the server's connection and shutdown codes, a closed
// connection, a network error, database/sql's bad connection) and the
// database does not answer a ping: a handler's own network error (a
// payment API that is down) is the handler's, and a connection killed
// while the server answers costs at most that attempt.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"entgo.io/ent/dialect"
	"github.com/ThreeDotsLabs/watermill"

	"github.com/entoutbox/entoutbox/internal/backoff"
	"github.com/entoutbox/entoutbox/internal/connerr"
)

// outagePauses are the breaker's settings: how long one delivery waits
// for the end of an outage before it is nacked, the probes' backoff, and
// how long a ping's answer serves other failures.
type outagePauses struct {
	hold          time.Duration
	probe, probes time.Duration // the first pause between two probes, and the longest
	pingReuse     time.Duration
	pingTimeout   time.Duration
}

var defaultOutagePauses = outagePauses{hold: 10 * time.Second, probe: 100 * time.Millisecond, probes: 5 * time.Second,
	pingReuse: time.Second, pingTimeout: 5 * time.Second}

// OutageError is what Handle returns for a delivery it nacks because the
// consumer's database could not be reached: no attempt was counted and
// nothing was dead-lettered; the broker delivers the message again.
type OutageError struct {
	Consumer string
	Err      error // the failure that met the outage, or the one that paused the instance
}

func (e *OutageError) Error() string {
	return fmt.Sprintf("consumer: %q paused: its database cannot be reached (%v); the delivery is nacked, to come again, "+
		"and counts no attempt", e.Consumer, e.Err)
}

func (e *OutageError) Unwrap() error { return e.Err }

// breaker pauses a handler set while its database cannot be reached.
type breaker struct {
	db     dialect.ExecQuerier // nil: no ping, the chain decides alone
	pauses outagePauses
	logger watermill.LoggerAdapter

	mu      sync.Mutex
	resumed chan struct{} // closed when the outage ends; nil while none
	since   time.Time     // when the outage began
	nacked  int           // deliveries nacked during it
	back    time.Time     // when the last outage ended; zero for none
	checked time.Time     // when the database was last pinged for a failure
	answers bool          // how it answered
}

func newBreaker(db dialect.ExecQuerier, pauses outagePauses, logger watermill.LoggerAdapter) *breaker {
	return &breaker{db: db, pauses: pauses, logger: logger}
}

// outage tells whether err is an outage of the database: a connection
// error while the database does not answer (or while the instance is
// paused already). It pauses the instance then.
func (b *breaker) outage(err error) bool {
	if !connerr.Lost(err) {
		return false
	}
	if b.paused() != nil {
		return true
	}
	if b.reachable() {
		return false
	}
	b.trip(err)
	return true
}

// reachable pings the database, or reuses an answer younger than
// pingReuse: a burst of failures costs one ping.
func (b *breaker) reachable() bool {
	if b.db == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if time.Since(b.checked) >= b.pauses.pingReuse {
		b.answers = b.ping()
		b.checked = time.Now()
	}
	return b.answers
}

// ping asks the database for one row, twice when the first meets a dead
// connection of the pool.
func (b *breaker) ping() bool {
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), b.pauses.pingTimeout)
		err := b.db.Exec(ctx, "SELECT 1", []any{}, nil)
		cancel()
		if err == nil {
			return true
		}
	}
	return false
}

// paused returns a channel closed when the current outage ends, or nil
// when there is none.
func (b *breaker) paused() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.resumed == nil {
		return nil
	}
	return b.resumed
}

// trip pauses the instance for cause, if it is not paused already, and
// starts probing the database.
func (b *breaker) trip(cause error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.resumed != nil {
		return
	}
	b.resumed, b.since, b.nacked = make(chan struct{}), time.Now(), 0
	b.logger.Error(PausedLog, cause, watermill.LogFields{"probe_every_up_to": b.pauses.probes.String()})
	go b.probe()
}

// probe pings the database with a backoff until it answers, then resumes
// the instance.
func (b *breaker) probe() {
	for n := 1; ; n++ {
		time.Sleep(backoff.Exponential(b.pauses.probe, b.pauses.probes, n))
		if b.db == nil || b.ping() {
			break
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.logger.Info(ResumedLog, watermill.LogFields{"paused_for": time.Since(b.since).Round(time.Millisecond).String(),
		"nacked": b.nacked})
	close(b.resumed)
	b.resumed, b.back, b.checked, b.answers = nil, time.Now(), time.Now(), true
}

// wait waits, while the instance is paused, until it resumes or hold has
// passed since the delivery began to wait (*waited, kept across calls),
// or ctx ends. It returns an *OutageError for a delivery to nack.
func (b *breaker) wait(ctx context.Context, consumer string, waited *time.Duration, cause error) error {
	for {
		resumed := b.paused()
		if resumed == nil {
			return nil
		}
		left := b.pauses.hold - *waited
		if left <= 0 {
			b.mu.Lock()
			b.nacked++
			b.mu.Unlock()
			if cause == nil {
				cause = errors.New("the instance is paused")
			}
			return &OutageError{Consumer: consumer, Err: cause}
		}
		began := time.Now()
		t := time.NewTimer(left)
		select {
		case <-resumed:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("consumer: %q stopped while paused for an outage: %w", consumer, ctx.Err())
		}
		t.Stop()
		*waited += time.Since(began)
	}
}

// upFor is how long the database has answered since the last outage
// ended; very long when there was none. An aggregate's wait for a
// missing event does not count the time an outage stopped it from being
// applied.
func (b *breaker) upFor() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.resumed != nil:
		return 0
	case b.back.IsZero():
		return time.Duration(1<<63 - 1)
	}
	return time.Since(b.back)
}

// PausedLog is the message a handler set logs, at error level with the
// failure as the error, when its database cannot be reached and it
// pauses; ResumedLog, at info level with the fields paused_for and
// nacked, when it answers again and the set resumes.
const (
	PausedLog  = "Consumer paused: its database cannot be reached; deliveries wait and are nacked to come again, none counts as an attempt nor is dead-lettered"
	ResumedLog = "Consumer resumed: its database answers again"
)
