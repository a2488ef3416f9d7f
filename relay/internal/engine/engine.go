package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/entoutbox/entoutbox/metrics"
)

// Delivery is one row a source handed out, and the way back to it: the
// engine calls exactly one of Delivered, Unsent and Failed, once. They
// may run on any goroutine and must be short.
type Delivery interface {
	Row() *Row
	Message() *message.Message // the row's message (Row.Message)
	// MayPublish tells whether the source may still have it published:
	// asked right before the broker is called, however long it waited.
	MayPublish() bool
	Delivered()
	// Unsent: not published, and no fault of the row (MayPublish refused
	// it, or the engine stopped); it comes again.
	Unsent()
	// Failed: the broker refused it; the failure policy decided.
	Failed(Decision)
}

// Engine publishes the deliveries of one read path.
type Engine struct {
	pub     *publishing
	policy  Policy
	metrics *metrics.Metrics // nil when off
}

// New is an engine that publishes as s says, concurrency publishes in
// flight at most, failures decided by policy.
func New(s Settings, concurrency int, policy Policy) *Engine {
	return &Engine{pub: startPublishing(s, concurrency), policy: policy, metrics: s.Metrics}
}

// Run publishes what next hands out until next reports nothing more
// (false) or ctx ends. A source hands out at most one row per aggregate at
// a time, so publishes in flight never reorder an aggregate.
func (e *Engine) Run(ctx context.Context, next func(context.Context) (Delivery, bool)) {
	for {
		d, ok := next(ctx)
		if !ok {
			return
		}
		if !e.pub.publish(ctx, d, func(err error) { e.outcome(d, err) }) {
			d.Unsent()
			return
		}
	}
}

// outcome takes the outcome of publishing d back to its source. A
// permanent error goes to the dead letters at once; the broker's health
// decides whether any other counts as an attempt.
func (e *Engine) outcome(d Delivery, err error) {
	switch {
	case err == nil:
		d.Delivered()
	case errors.Is(err, ErrNotPublished):
		d.Unsent()
	default:
		r := d.Row()
		dec := e.policy.Decide(Tries{Attempts: r.Attempts, Outages: r.Outages},
			Failure{Reason: err.Error(), Counts: e.pub.counts(err), Permanent: Permanent(err)})
		if !dec.DeadLetter {
			e.metrics.Retried(r.Topic)
		}
		d.Failed(dec)
	}
}

// Stop waits until the publishes in flight are done, up to timeout, and
// reports whether they all were. Call it once, after Run returned.
func (e *Engine) Stop(timeout time.Duration) bool { return e.pub.stop(timeout) }

// Close is Stop as its read path closes: publishes still in flight at
// timeout are logged as coming again.
func (e *Engine) Close(timeout time.Duration) {
	if !e.Stop(timeout) {
		stillInFlight(e.pub.cfg.Logger)
	}
}

// AwaitPublishes waits, as a read path closes, until what it handed out
// and is still under way (inFlight: publishes, and what their outcomes
// started) is done, up to timeout; what is not by then is logged, as by
// Close, as coming again, and it reports false.
func AwaitPublishes(inFlight *sync.WaitGroup, timeout time.Duration, logger watermill.LoggerAdapter) bool {
	if !waitFor(inFlight, timeout) {
		stillInFlight(logger)
		return false
	}
	return true
}

// stillInFlight says that publishes were still in flight when the read
// path closed: nothing records them delivered, so they will be relayed
// again.
func stillInFlight(logger watermill.LoggerAdapter) {
	logger.Info("Publishes still in flight at close timeout; they will be relayed again", nil)
}

// waitFor waits until wg is done, up to timeout, and reports whether it
// was.
func waitFor(wg *sync.WaitGroup, timeout time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// Permanent tells an error no retry can cure: it says so with a
// Permanent() bool method (the broker package's InvalidTopicError does).
func Permanent(err error) bool {
	var p interface{ Permanent() bool }
	return errors.As(err, &p) && p.Permanent()
}
