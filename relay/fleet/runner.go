package fleet

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/entoutbox/entoutbox/internal/backoff"
	"github.com/entoutbox/entoutbox/relay"
)

// State is where a tenant's relay is.
type State string

const (
	// StateStarting: its relay was started and is not ready yet.
	StateStarting State = "starting"
	// StateRunning: its relay runs and is ready (relay.Relay.Ready).
	StateRunning State = "running"
	// StateUnready: its relay runs but is not ready (its database or the
	// broker does not answer); it goes on trying by itself.
	StateUnready State = "unready"
	// StateFailed: its relay stopped on an error (the database cannot be
	// reached, lacks the outbox tables...); it is started again at
	// RetryAt.
	StateFailed State = "failed"
	// StateStopping: its entry left the file or changed; its relay is
	// finishing the publishes in flight.
	StateStopping State = "stopping"
	// StateParked: its relay is not running and its pool is closed: not
	// started yet (a tenant starts parked), or stopped gracefully after
	// nothing to publish for Config.IdleAfter. The fleet's prober starts
	// it when its outbox has work.
	StateParked State = "parked"
	// StateElsewhere: another process of the fleet relays it
	// (Config.Members); TenantStatus.Member names that process.
	StateElsewhere State = "elsewhere"
	// StateWaiting: its relay is due to run (its outbox has work, or its
	// turn ended) and waits for room in the connection budget: as many
	// relays run at once as RelaysAtOnce says, each for Config.Turn at
	// least while others wait.
	StateWaiting State = "waiting"
)

// TenantStatus is the state of one tenant's relay.
type TenantStatus struct {
	Tenant string
	State  State
	// LastError is the last error of the tenant's relay, kept once it
	// recovered; LastErrorAt when it came.
	LastError   string
	LastErrorAt time.Time
	// Failures counts the failed starts since the relay was last ready.
	Failures int
	// RetryAt is when a failed relay is started again.
	RetryAt time.Time
	// Connections bounds the tenant's pool.
	Connections int
	// Member is the process of the fleet that relays the tenant, with
	// Config.Members: this one's MemberID, or another's (StateElsewhere).
	Member string
}

// How often a relay's readiness is asked: often while it starts, less
// once it was ready.
const (
	startingInterval = 250 * time.Millisecond
	readyInterval    = 2 * time.Second
	startingGrace    = 10 * time.Second
)

// runner runs one tenant's relay, starting it again after a failure.
type runner struct {
	tenant Tenant
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	st    TenantStatus
	db    *sql.DB // the pool of the relay running, nil between runs
	run   int     // counts the relay's runs: a late readiness of an ended one is ignored
	conns int
	// started is when the relay running was started: until startingGrace
	// after it, not being ready is no error.
	started time.Time
	// active is when its relay last had something to publish; parking
	// is set from the moment it is parked until it is woken.
	active  activity
	parking bool
	wake    chan struct{} // the prober found work: start the relay again
}

// errParked ends a relay's run when its tenant is parked.
var errParked = errors.New("parked: nothing to relay")

// start runs the relay of tenant t until ctx ends or it is stopped.
func (f *Fleet) start(ctx context.Context, t Tenant, conns int) *runner {
	ctx, cancel := context.WithCancel(ctx)
	// Not starting yet: its relay starts when it has work (parked until
	// then) and room in the budget (waiting until then).
	first := StateWaiting
	if f.cfg.IdleAfter > 0 {
		first = StateParked
	}
	r := &runner{tenant: t, cancel: cancel, done: make(chan struct{}), conns: conns, wake: make(chan struct{}, 1),
		st: TenantStatus{Tenant: t.Name, State: first, Connections: conns}}
	go f.keepRunning(ctx, r)
	return r
}

// keepRunning runs r's relay, and after each failure waits (doubling from
// RetryInterval; from the start again after a run of a while) and runs it
// again, until ctx ends.
func (f *Fleet) keepRunning(ctx context.Context, r *runner) {
	defer close(r.done)
	log := f.logger.With(watermill.LogFields{"tenant": r.tenant.Name})
	if f.cfg.IdleAfter > 0 && !r.waitParked(ctx, log) {
		return // started parked: a tenant without work costs no connection, even at the start
	}
	attempt := 0
	for {
		if !f.takeTurn(ctx, r, log) {
			return
		}
		began := time.Now()
		err := f.runOnce(ctx, r, log)
		turnOver := errors.Is(err, errParked) || errors.Is(err, errYield)
		if ctx.Err() != nil {
			f.turns.release(func() {})
			log.Info("Tenant's relay stopped", nil)
			return
		}
		if turnOver {
			attempt = 0
			f.turns.release(func() { r.turnOver(f.cfg.IdleAfter > 0) })
			if f.cfg.IdleAfter <= 0 {
				continue // behind the tenants that waited
			}
			if !r.waitParked(ctx, log) { // woken, and behind the others, if it has work still
				return
			}
			continue
		}
		if err == nil {
			err = errors.New("the relay returned without being stopped")
		}
		if time.Since(began) > f.cfg.MaxRetryInterval {
			attempt = 0
		}
		attempt++
		wait := backoff.Exponential(f.cfg.RetryInterval, f.cfg.MaxRetryInterval, attempt)
		f.turns.release(func() { r.failed(err, wait) })
		log.Error("Tenant's relay failed; starting it again later", err, watermill.LogFields{"retry_in": wait.String(), "failures": attempt})
		if !backoff.Sleep(ctx, wait) {
			return
		}
	}
}

// runOnce opens the tenant's pool and runs its relay on it until ctx ends
// or the relay fails.
func (f *Fleet) runOnce(ctx context.Context, r *runner, log watermill.LoggerAdapter) error {
	db, err := f.cfg.Open(r.tenant.URL())
	if err != nil {
		return fmt.Errorf("opening the database: %w", err)
	}
	defer db.Close()
	gen := r.setDB(db)
	defer r.setDB(nil)
	cfg := f.cfg.Relay
	cfg.DB, cfg.Tenant, cfg.Logger = db, r.tenant.Name, log
	cfg.Publisher = watchPublishes(cfg.Publisher, &r.active)
	if f.metrics != nil {
		cfg.Metrics = f.metrics.of(r.tenant.Name)
	}
	if cfg.Path == relay.PathFast && cfg.Fast.RelayID == "" {
		cfg.Fast.RelayID = f.prefix + r.tenant.Name
	}
	rl, err := relay.New(cfg)
	if err != nil {
		return err
	}
	rctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go r.watchReady(rctx, rl, gen)
	run, end := context.WithCancelCause(ctx)
	defer end(nil)
	if f.cfg.IdleAfter > 0 {
		go r.watchIdle(rctx, f.cfg.IdleAfter, end)
	}
	go f.watchTurn(rctx, time.Now(), end)
	err = rl.Run(run)
	if cause := context.Cause(run); (cause == errParked || cause == errYield) && ctx.Err() == nil {
		return cause
	}
	return err
}

// takeTurn waits, shown waiting, until there is room in the connection
// budget for r's relay (Fleet.turns) and takes it, shown starting from
// that moment; false when ctx ended first.
func (f *Fleet) takeTurn(ctx context.Context, r *runner, log watermill.LoggerAdapter) bool {
	starting := func() { r.setWaiting(false) }
	if f.turns.tryAcquire(starting) {
		return true
	}
	r.setWaiting(true)
	log.Debug("Tenant waits for room in the connection budget", nil)
	return f.turns.acquire(ctx, starting)
}

// setWaiting shows r waiting for room in the budget, or no longer.
func (r *runner) setWaiting(waiting bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.st.State == StateStopping:
	case waiting:
		r.st.State = StateWaiting
	case r.st.State == StateWaiting:
		r.st.State = StateStarting
	}
}

// turnOver shows r, whose relay made way (parked, or its turn over), no
// longer running: parked until the prober finds work, or waiting for its
// next turn.
func (r *runner) turnOver(parks bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.st.State == StateStopping:
	case parks:
		r.parking = true
		r.st.State = StateParked
	default:
		r.st.State = StateWaiting
	}
}

// watchReady keeps r's state to what its relay's readiness says, until
// ctx ends.
func (r *runner) watchReady(ctx context.Context, rl *relay.Relay, run int) {
	wait := startingInterval
	for {
		err := rl.Ready(ctx)
		if ctx.Err() != nil {
			return
		}
		if r.ready(err, run) {
			wait = readyInterval
		}
		if !backoff.Sleep(ctx, wait) {
			return
		}
	}
}

// stop tells r's relay to stop; done closes once it has.
func (r *runner) stop() {
	r.mu.Lock()
	r.st.State = StateStopping
	r.mu.Unlock()
	r.cancel()
}

// ready records the answer of the relay's readiness, and says whether the
// relay was ready once.
func (r *runner) ready(err error, run int) (wasReady bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st.State == StateStopping || r.parking || r.db == nil || run != r.run {
		return true // the relay asked has stopped: its answer came late, and says nothing of the tenant now
	}
	if err == nil {
		r.st.State, r.st.Failures, r.st.RetryAt = StateRunning, 0, time.Time{}
		return true
	}
	if r.st.State == StateRunning || r.st.State == StateUnready {
		r.st.State = StateUnready
		wasReady = true
	}
	if wasReady || time.Since(r.started) > startingGrace {
		r.st.LastError, r.st.LastErrorAt = err.Error(), time.Now()
	}
	return wasReady
}

// failed records a failed run, started again after wait.
func (r *runner) failed(err error, wait time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st.State == StateStopping {
		return
	}
	now := time.Now()
	r.st.State, r.st.LastError, r.st.LastErrorAt = StateFailed, err.Error(), now
	r.st.Failures++
	r.st.RetryAt = now.Add(wait)
}

func (r *runner) setDB(db *sql.DB) (run int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.db = db
	if db != nil {
		r.run++
		r.started = time.Now()
		r.active.seen()
		r.applyConns()
		if r.st.State == StateFailed {
			r.st.State = StateStarting
		}
	}
	return r.run
}

// setConnections bounds the tenant's pool to n connections, the running
// one at once.
func (r *runner) setConnections(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.conns, r.st.Connections = n, n
	r.applyConns()
}

func (r *runner) applyConns() {
	if r.db != nil {
		r.db.SetMaxOpenConns(r.conns)
		r.db.SetMaxIdleConns(r.conns) // kept, not opened and closed all the time
	}
}

func (r *runner) status() TenantStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st
}
