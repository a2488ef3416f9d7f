package relay

import (
	"context"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/trace"
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

	// A fixed pool of publishers: a goroutine per message would grow a
	// fresh stack through the broker client's calls every time.
	var (
		wg     sync.WaitGroup
		work   = make(chan *message.Message)
		health = newPublishHealth(r.cfg.Publisher, r.cfg.Logger)
	)
	for range r.cfg.Fast.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for msg := range work {
				r.publish(sub, msg, health)
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
	rowTopic := out.Metadata.Get(MetaTopic)
	topic := r.cfg.TopicPrefix + rowTopic
	delete(out.Metadata, MetaTopic)
	var span trace.Span
	if tracer := r.tracer.Get(); tracer != nil {
		span = startSend(tracer, r.messagingSystem(), topic, out)
	}
	var started time.Time
	if r.cfg.Metrics != nil {
		started = time.Now()
	}
	err := r.cfg.Publisher.Publish(topic, out)
	if m := r.cfg.Metrics; m != nil {
		m.Published(rowTopic, time.Since(started), err)
		if err == nil {
			m.Delivered(rowTopic, createdAt(out.Metadata))
		}
	}
	if span != nil {
		endSpan(span, err)
	}
	if err != nil {
		// A permanent error goes to the dead letters at once (Fail tells);
		// the health of the broker decides whether any other counts.
		sub.Fail(msg, err, permanent(err) || health.failed(err))
		return
	}
	health.succeeded()
	msg.Ack()
}

// publishHealth tells a message's own failure from an outage, so that
// only the first count towards MaxAttempts. With a publisher that can be
// pinged (every broker.Broker's), a failure counts when the broker answers
// a ping: a poison row reaches the dead letters after its attempts even on
// an idle system, and nothing is dead-lettered for an outage. With another
// publisher, once several publishes in a row have failed with no success
// between them, failures stop counting until a publish succeeds again.
//
// It also says once when publishes start failing for an outage, and once
// when they work again: a relay silent while the broker is away looks
// idle.
type publishHealth struct {
	pinger pinger
	streak atomic.Int64
	logger watermill.LoggerAdapter

	failing atomic.Bool // in an outage, said so, and not over yet
	outMu   sync.Mutex
	since   time.Time // when the outage was first seen
	fails   int64     // publishes failed since

	mu      sync.Mutex
	checked time.Time // when the broker was last pinged
	answers bool      // how it answered
}

// pinger is a publisher that can tell whether its broker takes publishes
// at all (see broker.Pinger).
type pinger interface {
	Ping(ctx context.Context) error
}

const (
	outageStreak = 3
	// A ping's answer serves the failures of the next pingReuse, so that an
	// outage costs one ping at a time, not one per failed publish.
	pingReuse   = time.Second
	pingTimeout = 5 * time.Second
)

func newPublishHealth(pub message.Publisher, logger watermill.LoggerAdapter) *publishHealth {
	h := &publishHealth{logger: logger}
	h.pinger, _ = pub.(pinger)
	return h
}

func (h *publishHealth) succeeded() {
	h.streak.Store(0)
	if !h.failing.Load() {
		return
	}
	h.outMu.Lock()
	defer h.outMu.Unlock()
	if h.failing.CompareAndSwap(true, false) {
		h.logger.Info("Publishing to the broker works again", watermill.LogFields{
			"failed_for": time.Since(h.since).Round(time.Millisecond).String(), "failed_publishes": h.fails})
	}
}

// failed records a failure, err, and tells whether it counts as an
// attempt: it does not in an outage.
func (h *publishHealth) failed(err error) bool {
	counts := h.counts()
	h.outMu.Lock()
	defer h.outMu.Unlock()
	if h.failing.Load() {
		h.fails++
	} else if !counts {
		// A failure that counts is the message's own (the broker
		// answers): no outage to tell of.
		h.since, h.fails = time.Now(), 1
		h.failing.Store(true)
		h.logger.Error("Publishing to the broker fails; retrying until it works again (failures in an outage "+
			"do not count as attempts)", err, nil)
	}
	return counts
}

func (h *publishHealth) counts() bool {
	if h.pinger == nil {
		return h.streak.Add(1) <= outageStreak
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if time.Since(h.checked) >= pingReuse {
		ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
		h.answers = h.pinger.Ping(ctx) == nil
		cancel()
		h.checked = time.Now()
	}
	return h.answers
}
