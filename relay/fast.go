package relay

import (
	"context"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// runFast publishes what the fast Subscriber hands out, many at a time:
// the Subscriber sends at most one message per aggregate until it is
// acked, so concurrency never reorders an aggregate.
func (r *Relay) runFast(ctx context.Context) error {
	sub, err := NewSubscriber(r.cfg.DB, SubscriberConfig{
		Table: r.cfg.Table, DeadLetterTable: r.cfg.DeadLetterTable, RelayID: r.cfg.RelayID,
		BatchSize: r.cfg.BatchSize, Lease: r.cfg.Lease, Partitions: r.cfg.Partitions, PollInterval: r.cfg.PollInterval,
		PollOnly: r.cfg.PollOnly, Delete: r.cfg.DeleteDelivered, MaxAttempts: r.cfg.MaxAttempts,
		InitialBackoff: r.cfg.RetryInterval, Logger: r.cfg.Logger,
	})
	if err != nil {
		return err
	}
	defer sub.Close()
	readCtx, stopReading := context.WithCancel(context.Background())
	defer stopReading()
	msgs, err := sub.Subscribe(readCtx, AllTopics)
	if err != nil {
		return err
	}
	r.cfg.Logger.Info("Relay running", map[string]any{"path": r.cfg.Path, "table": r.cfg.Table})

	// A fixed pool of publishers: a goroutine per message would grow a
	// fresh stack through the broker client's calls every time.
	var (
		wg     sync.WaitGroup
		work   = make(chan *message.Message)
		health publishHealth
	)
	for range r.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for msg := range work {
				r.publish(sub, msg, &health)
			}
		}()
	}
	stop := func() error {
		// Stop taking messages, let the publishes in flight finish and be
		// recorded, then Close releases everything else.
		stopReading()
		close(work)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(r.cfg.CloseTimeout):
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
			select {
			case work <- msg:
			case <-ctx.Done():
				msg.Nack() // not published: it comes again
				return stop()
			}
		}
	}
}

func (r *Relay) publish(sub *Subscriber, msg *message.Message, health *publishHealth) {
	out := message.NewMessage(msg.UUID, msg.Payload)
	out.Metadata = maps.Clone(msg.Metadata)
	topic := r.cfg.TopicPrefix + out.Metadata.Get(MetaTopic)
	delete(out.Metadata, MetaTopic)
	if err := r.cfg.Publisher.Publish(topic, out); err != nil {
		sub.Fail(msg, err, health.failed())
		return
	}
	health.succeeded()
	msg.Ack()
}

// publishHealth tells a message's own failure from an outage: once several
// publishes in a row have failed with no success between them, failures
// stop counting towards MaxAttempts until a publish succeeds again. A
// poisoned event among healthy ones still reaches the dead letters.
type publishHealth struct {
	streak atomic.Int64
}

const outageStreak = 3

func (h *publishHealth) succeeded() { h.streak.Store(0) }

// failed records a failure and tells whether it counts as an attempt.
func (h *publishHealth) failed() bool { return h.streak.Add(1) <= outageStreak }
