package relay

import (
	"context"
	"errors"

	"github.com/entoutbox/entoutbox/metrics"
)

// engineBuffer is the room of the fast source's channel to the engine: the
// subscription hands out in bursts while the engine publishes.
const engineBuffer = 16

// runFast publishes what the fast source hands out, many at a time: it
// hands out at most one row per aggregate until that one is settled, so
// concurrency never reorders an aggregate.
func (r *Relay) runFast(ctx context.Context) error {
	src, err := newFastSource(r.cfg.DB, r.cfg.subscriberConfig())
	if err != nil {
		return err
	}
	defer src.close()
	src.hooks = r.hooks
	r.fast.Store(src)
	defer r.cfg.Metrics.WatchPartitions(func() int {
		st, _ := r.Status()
		return st.Partitions
	})()
	readCtx, stopReading := context.WithCancel(withMetrics(context.Background(), r.cfg.Metrics))
	defer stopReading()
	sub, err := src.subscribe(readCtx, AllTopics, engineBuffer)
	if err != nil {
		return err
	}
	r.cfg.Logger.Info("Relay running", map[string]any{"path": r.cfg.Path, "table": r.cfg.Table})

	e := r.newEngine(r.cfg.Concurrency, src.cfg.failurePolicy())
	e.Run(ctx, sub.next)
	// Stop taking rows, let the publishes in flight finish and be
	// recorded, then close releases everything else.
	stopReading()
	e.Close(r.cfg.CloseTimeout)
	if ctx.Err() == nil {
		return errors.New("relay: the outbox subscription ended")
	}
	return nil
}

// metricsKey carries the relay's *metrics.Metrics to its fast Subscriber's
// subscriptions, on the context they run with: a Subscriber used on its
// own reports nothing.
type metricsKey struct{}

func withMetrics(ctx context.Context, m *metrics.Metrics) context.Context {
	if m == nil {
		return ctx
	}
	return context.WithValue(ctx, metricsKey{}, m)
}

func metricsFrom(ctx context.Context) *metrics.Metrics {
	m, _ := ctx.Value(metricsKey{}).(*metrics.Metrics)
	return m
}
