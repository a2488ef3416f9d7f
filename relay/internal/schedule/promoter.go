package schedule

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/entoutbox/entoutbox/internal/backoff"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// Defaults of Settings.
const (
	DefaultBatchSize = 1000
	// DefaultMaxSleep bounds every wait: without notifications (a pooler in
	// transaction mode, a lost LISTEN connection) an event scheduled to be
	// due sooner than the one waited for is moved at most this late.
	DefaultMaxSleep      = 5 * time.Second
	DefaultRetryInterval = 100 * time.Millisecond
)

// skippedFirst is the first wait when an event is due and none moved: a
// Cancel in progress holds it, or an Emit in progress its aggregate's
// counter (skipped, not waited for). It doubles up to MaxSleep, so that a
// long transaction costs no spin.
const skippedFirst = 10 * time.Millisecond

// Settings is what a Promoter takes of the relay.
type Settings struct {
	// DB runs the promotions and the reads.
	DB *sql.DB
	// ListenDB is where the promoter LISTENs on the scheduled table's
	// channel (outbox.ScheduledChannel); nil to only wake every MaxSleep.
	ListenDB *sql.DB
	// Tables names the outbox (Outbox), scheduled (Scheduled) and sequence
	// (Sequences, "" for none) tables. Check drops a sequence table that
	// does not exist.
	Tables outboxdb.Tables
	// Logger; watermill.NopLogger when nil.
	Logger watermill.LoggerAdapter
	// BatchSize bounds the events one promotion moves; DefaultBatchSize
	// when zero.
	BatchSize int
	// MaxSleep bounds a wait for the next due event; DefaultMaxSleep when
	// zero.
	MaxSleep time.Duration
	// RetryInterval is the first wait after a failure, doubling up to
	// MaxSleep; DefaultRetryInterval when zero.
	RetryInterval time.Duration
	// Metrics receives what it does; nothing when its fields are nil.
	Metrics Metrics
}

// Metrics are the promoter's hooks for the relay's metrics.
type Metrics struct {
	// Promoted is told how many events a promotion moved, when it moved
	// some.
	Promoted func(n int)
	// Failed is told each failed promotion or read.
	Failed func(err error)
}

func (s *Settings) setDefaults() {
	if s.Logger == nil {
		s.Logger = watermill.NopLogger{}
	}
	if s.BatchSize <= 0 {
		s.BatchSize = DefaultBatchSize
	}
	if s.MaxSleep <= 0 {
		s.MaxSleep = DefaultMaxSleep
	}
	if s.RetryInterval <= 0 {
		s.RetryInterval = DefaultRetryInterval
	}
	if s.Metrics.Promoted == nil {
		s.Metrics.Promoted = func(int) {}
	}
	if s.Metrics.Failed == nil {
		s.Metrics.Failed = func(error) {}
	}
}

// Check tells whether tables' scheduled table exists (nothing to promote
// when it does not), and returns tables without their sequence table when
// that one does not exist (the promoted events are not numbered then, as
// Emit numbers none).
func Check(ctx context.Context, q outboxdb.Querier, tables outboxdb.Tables) (outboxdb.Tables, bool, error) {
	if tables.Scheduled == "" {
		return tables, false, nil
	}
	exists, err := tables.TableExists(ctx, q, tables.Scheduled)
	if err != nil || !exists {
		return tables, false, err
	}
	if tables.Sequences != "" {
		seq, err := tables.TableExists(ctx, q, tables.Sequences)
		if err != nil {
			return tables, false, err
		}
		if !seq {
			tables.Sequences = ""
		}
	}
	return tables, true, nil
}

// Promoter moves due scheduled events into the outbox.
type Promoter struct {
	s    Settings
	wake chan struct{}
}

// New returns a promoter with s's defaults; Run runs it.
func New(s Settings) *Promoter {
	s.setDefaults()
	return &Promoter{s: s, wake: make(chan struct{}, 1)}
}

// Run promotes until ctx ends, and returns nil then. When the scheduled
// table does not exist it says so at info and waits for ctx: there is
// nothing to promote. Failures are logged and retried, never returned.
func (p *Promoter) Run(ctx context.Context) error {
	var (
		tables  outboxdb.Tables
		enabled bool
	)
	for attempt := 1; ; attempt++ {
		var err error
		if tables, enabled, err = Check(ctx, p.s.DB, p.s.Tables); err == nil {
			break
		}
		if !p.failed(ctx, attempt, fmt.Errorf("looking for the scheduled events' table: %w", err)) {
			return nil
		}
	}
	if !enabled {
		p.s.Logger.Info("Scheduled events are not promoted: the table does not exist (restart the relay after migrating "+
			"to deliver events emitted with DeliverAt or DeliverAfter)", watermill.LogFields{"scheduled_table": p.s.Tables.Scheduled})
		<-ctx.Done()
		return nil
	}
	p.s.Tables = tables
	if p.s.ListenDB != nil {
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			p.listen(ctx)
		}()
	}
	p.loop(ctx)
	return nil
}

// loop promotes what is due, then waits until the next is due by the
// database's clock, a notification, or MaxSleep.
func (p *Promoter) loop(ctx context.Context) {
	failures, skipped := 0, 0
	for ctx.Err() == nil {
		wait, err := p.step(ctx, &skipped)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			if !p.failed(ctx, failures, err) {
				return
			}
			continue
		}
		failures = 0
		if wait <= 0 {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-p.wake:
		}
		t.Stop()
	}
}

// step promotes once if an event is due, and returns how long to wait
// before the next step. The database's clock alone says what is due and
// how long until the next: the promoter reads no time of its own.
func (p *Promoter) step(ctx context.Context, skipped *int) (time.Duration, error) {
	next, pending, err := p.s.Tables.NextDue(ctx, p.s.DB)
	if err != nil {
		return 0, err
	}
	if !pending {
		*skipped = 0
		return p.s.MaxSleep, nil
	}
	if next > 0 {
		*skipped = 0
		// A millisecond past it, so that the wake-up finds it due.
		return min(next+time.Millisecond, p.s.MaxSleep), nil
	}
	moved, _, err := p.s.Tables.Promote(ctx, p.s.DB, p.s.BatchSize)
	if err != nil {
		return 0, err
	}
	if moved > 0 {
		*skipped = 0
		p.s.Metrics.Promoted(moved)
		return 0, nil
	}
	// Due, and none moved: another relay's promotion holds the lock (it
	// may be its last: the relay may be stopping), or transactions in
	// progress hold the events or their aggregates' counters. Look again
	// soon, less often while it lasts.
	*skipped++
	return backoff.Exponential(skippedFirst, p.s.MaxSleep, *skipped), nil
}

// failed logs err, tells the metrics, and waits before the next try;
// false when ctx ended meanwhile.
func (p *Promoter) failed(ctx context.Context, attempt int, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	p.s.Metrics.Failed(err)
	wait := backoff.Exponential(p.s.RetryInterval, p.s.MaxSleep, attempt)
	p.s.Logger.Error("Could not promote the due scheduled events; retrying", err,
		watermill.LogFields{"scheduled_table": p.s.Tables.Scheduled, "attempt": attempt, "retry_in": wait.String()})
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
