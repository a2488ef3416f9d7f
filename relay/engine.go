package relay

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/entoutbox/entoutbox/metrics"
)

// The engine is what every row a read path hands out goes through: it
// publishes it (publishing: many in flight, and the broker-health rule
// that tells an outage from a message's own failure), decides what becomes
// of a failure (the failure policy), and takes the outcome back to the
// path. A read path, a source, only hands rows out and carries out their
// outcomes: the fast path's subscription, the WAL path's session. (The
// compatible path is Watermill's own forwarder.)

// delivery is one row a source handed out, and the way back to it: the
// engine calls exactly one of delivered, unsent and failed, once. They
// may run on any goroutine and must be short.
type delivery interface {
	row() *row
	message() *message.Message // the row's message (row.message)
	// mayPublish tells whether the source may still have it published:
	// asked right before the broker is called, however long it waited.
	mayPublish() bool
	delivered()
	// unsent: not published, and no fault of the row (mayPublish refused
	// it, or the engine stopped); it comes again.
	unsent()
	// failed: the broker refused it; the failure policy decided.
	failed(decision)
}

// engine publishes the deliveries of one read path.
type engine struct {
	pub     *publishing
	policy  failurePolicy
	metrics *metrics.Metrics // nil when off
}

// newEngine is the relay's engine: concurrency publishes in flight at
// most, failures decided by policy.
func (r *Relay) newEngine(concurrency int, policy failurePolicy) *engine {
	pub := startPublishing(publishSettings{publisher: r.cfg.Publisher, logger: r.cfg.Logger,
		topicPrefix: r.cfg.TopicPrefix, tracer: r.tracer, system: r.messagingSystem(), metrics: r.cfg.Metrics}, concurrency)
	return &engine{pub: pub, policy: policy, metrics: r.cfg.Metrics}
}

// run publishes what next hands out until next reports nothing more
// (false) or ctx ends. A source hands out at most one row per aggregate at
// a time, so publishes in flight never reorder an aggregate.
func (e *engine) run(ctx context.Context, next func(context.Context) (delivery, bool)) {
	for {
		d, ok := next(ctx)
		if !ok {
			return
		}
		if !e.pub.publish(ctx, d, func(err error) { e.outcome(d, err) }) {
			d.unsent()
			return
		}
	}
}

// outcome takes the outcome of publishing d back to its source. A
// permanent error goes to the dead letters at once; the broker's health
// decides whether any other counts as an attempt.
func (e *engine) outcome(d delivery, err error) {
	switch {
	case err == nil:
		d.delivered()
	case errors.Is(err, errNotPublished):
		d.unsent()
	default:
		r := d.row()
		dec := e.policy.decide(tries{attempts: r.attempts, outages: r.outages},
			failure{reason: err.Error(), counts: e.pub.counts(err), permanent: permanent(err)})
		if !dec.deadLetter {
			e.metrics.Retried(r.topic)
		}
		d.failed(dec)
	}
}

// stop waits until the publishes in flight are done, up to timeout, and
// reports whether they all were. Call it once, after run returned.
func (e *engine) stop(timeout time.Duration) bool { return e.pub.stop(timeout) }

// permanent tells an error no retry can cure: it says so with a
// Permanent() bool method (the broker package's InvalidTopicError does).
func permanent(err error) bool {
	var p interface{ Permanent() bool }
	return errors.As(err, &p) && p.Permanent()
}
