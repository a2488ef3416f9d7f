package relay

import (
	"context"
	"errors"

	"github.com/ThreeDotsLabs/watermill/message"
)

// runFast publishes what the fast Subscriber hands out, many at a time:
// the Subscriber sends at most one message per aggregate until it is
// acked, so concurrency never reorders an aggregate.
func (r *Relay) runFast(ctx context.Context) error {
	sub, err := NewSubscriber(r.cfg.DB, r.cfg.subscriberConfig())
	if err != nil {
		return err
	}
	defer sub.Close()
	sub.direct, sub.hooks = true, r.hooks
	r.fast.Store(sub)
	defer r.cfg.Metrics.WatchPartitions(func() int {
		st, _ := r.Status()
		return st.Partitions
	})()
	readCtx, stopReading := context.WithCancel(withMetrics(context.Background(), r.cfg.Metrics))
	defer stopReading()
	msgs, err := sub.Subscribe(readCtx, AllTopics)
	if err != nil {
		return err
	}
	r.cfg.Logger.Info("Relay running", map[string]any{"path": r.cfg.Path, "table": r.cfg.Table})

	pub := r.startPublishing(r.cfg.Concurrency)
	// A message may wait long for a publish slot: by then the subscription
	// may no longer own its row's partition.
	pub.mayPublish = func(msg *message.Message) bool { return msg.Context().(*directMsg).mayPublish() }
	stop := func() error {
		// Stop taking messages, let the publishes in flight finish and be
		// recorded, then Close releases everything else.
		stopReading()
		if !pub.stop(r.cfg.CloseTimeout) {
			r.cfg.Logger.Info("Publishes still in flight at close timeout; they will be relayed again", nil)
		}
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return stop()
		case msg, ok := <-msgs:
			if !ok {
				if ctx.Err() != nil {
					continue
				}
				_ = stop()
				return errors.New("relay: the outbox subscription ended")
			}
			if !pub.publish(ctx, msg, func(err error) {
				if errors.Is(err, errNotPublished) {
					unsent(msg)
					return
				}
				if err != nil {
					// A permanent error goes to the dead letters at once
					// (Fail tells); the broker's health decides whether
					// any other counts.
					sub.Fail(msg, err, pub.counts(err))
					return
				}
				settle(msg, true)
			}) {
				settle(msg, false) // not published: it comes again
				return stop()
			}
		}
	}
}
