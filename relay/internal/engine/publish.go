package engine

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

	"github.com/entoutbox/entoutbox/internal/tracing"
	"github.com/entoutbox/entoutbox/metrics"
)

// publishing sends the deliveries of a read path to the broker, many in
// flight at once, and tells each one's outcome: the engine's publishing.
// The read path keeps per-aggregate order by handing out at most one row
// per aggregate at a time.
//
// A publisher that publishes without waiting (asyncPublisher, as the
// broker package's NATS publisher) is called from the read path's own
// goroutine, with at most concurrency messages in flight: the messages go
// out together and their confirmations come back together. Any other
// publisher is called from a pool of concurrency goroutines, each waiting
// for one confirmation (a goroutine per message would grow a fresh stack
// through the broker client's calls every time).
type publishing struct {
	cfg    Settings
	health *publishHealth
	async  asyncPublisher
	slots  chan struct{} // async: one per message in flight
	work   chan outgoing // pool: the messages for the publishers
	wg     sync.WaitGroup
}

// ErrNotPublished tells a delivery was not published: its MayPublish,
// asked right before the broker is called, refused it.
var ErrNotPublished = errors.New("relay: not published: the read path may no longer send it")

// asyncPublisher is broker.AsyncPublisher: PublishAsync returns at once
// and calls done exactly once with the broker's answer.
type asyncPublisher interface {
	PublishAsync(topic string, msg *message.Message, done func(error))
}

// outgoing is one delivery to publish and what to do with the outcome.
type outgoing struct {
	d    Delivery
	done func(error)
}

// Settings is what publishing takes of the relay's settings.
type Settings struct {
	Publisher   message.Publisher
	Logger      watermill.LoggerAdapter
	TopicPrefix string
	Tracer      *tracing.Tracer
	System      string           // the spans' messaging.system
	Metrics     *metrics.Metrics // nil when off
}

func startPublishing(cfg Settings, concurrency int) *publishing {
	p := &publishing{cfg: cfg, health: newPublishHealth(cfg.Publisher, cfg.Logger)}
	if async, ok := cfg.Publisher.(asyncPublisher); ok {
		p.async, p.slots = async, make(chan struct{}, concurrency)
		return p
	}
	p.work = make(chan outgoing)
	for range concurrency {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for o := range p.work {
				if !o.d.MayPublish() {
					o.done(ErrNotPublished)
					continue
				}
				s := p.prepare(o.d)
				err := cfg.Publisher.Publish(s.topic, s.out)
				s.finish(err)
				o.done(err)
			}
		}()
	}
	return p
}

// publish sends the message of d to the broker, on its row's topic, and
// calls done with the outcome once the broker confirmed or refused it
// (ErrNotPublished when d.MayPublish refused it). It blocks while
// concurrency messages are in flight, or until ctx ends (then it returns
// false and done is not called). done may run on another goroutine: it
// must be short.
func (p *publishing) publish(ctx context.Context, d Delivery, done func(error)) bool {
	if p.async == nil {
		select {
		case p.work <- outgoing{d: d, done: done}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	if !d.MayPublish() {
		<-p.slots
		done(ErrNotPublished)
		return true
	}
	p.wg.Add(1)
	s := p.prepare(d)
	p.async.PublishAsync(s.topic, s.out, func(err error) {
		s.finish(err)
		<-p.slots
		p.wg.Done()
		done(err)
	})
	return true
}

// counts tells whether a failed publish counts as an attempt of its
// message: it does when no retry can cure it, or when the broker answers
// (the message's own fault); not in an outage.
func (p *publishing) counts(err error) bool {
	return Permanent(err) || p.health.failed(err)
}

// stop waits until the publishes in flight are done, up to timeout, and
// reports whether they all were. Call it once, after the last publish.
func (p *publishing) stop(timeout time.Duration) bool {
	if p.work != nil {
		close(p.work)
	}
	return waitFor(&p.wg, timeout)
}

// sending is one publish under way: the message as it goes out, its span
// and when it started.
type sending struct {
	p               *publishing
	out             *message.Message
	rowTopic, topic string
	span            trace.Span
	started         time.Time
}

// prepare makes the message that goes out for d: on its row's topic with
// the relay's prefix, in a producer span.
func (p *publishing) prepare(d Delivery) sending {
	msg := d.Message()
	var out *message.Message
	if p.async != nil {
		// An async publisher only reads it (see broker.AsyncPublisher):
		// no ack channels to make.
		out = &message.Message{UUID: msg.UUID, Payload: msg.Payload}
	} else {
		// A publisher may hand it to subscribers who ack it (Watermill's
		// gochannel does): a message of its own.
		out = message.NewMessage(msg.UUID, msg.Payload)
	}
	out.Metadata = maps.Clone(msg.Metadata)
	s := sending{p: p, out: out, rowTopic: d.Row().Topic}
	s.topic = p.cfg.TopicPrefix + s.rowTopic
	if tracer := p.cfg.Tracer.Get(); tracer != nil {
		s.span = StartSend(tracer, p.cfg.System, s.topic, out)
	}
	if p.cfg.Metrics != nil {
		s.started = time.Now()
	}
	return s
}

// finish counts the outcome of the publish and ends its span.
func (s sending) finish(err error) {
	if m := s.p.cfg.Metrics; m != nil {
		m.Published(s.rowTopic, time.Since(s.started), err)
		if err == nil {
			m.Delivered(s.rowTopic, CreatedAt(s.out.Metadata))
			m.ScheduledDelivered(s.rowTopic, DeliverAt(s.out.Metadata))
		}
	}
	if s.span != nil {
		EndSpan(s.span, err)
	}
	if err == nil {
		s.p.health.succeeded()
	}
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
	pinger Pinger
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

// Pinger is a publisher that can tell whether its broker takes publishes
// at all (see broker.Pinger).
type Pinger interface {
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
	h.pinger, _ = pub.(Pinger)
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
