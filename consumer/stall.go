package consumer

// Saying when a consumer is stuck. Deliveries that wait for their
// aggregate's previous event and are nacked to come again are normal flow
// (logged at debug): another instance is applying that event, or a killed
// instance's messages come back after the broker's timeout. A topic on
// which this instance holds waiting events and on which no event was
// applied for StallAfter (here, or by another instance as far as its
// notifications tell) is not: it logs one line naming the topic, the
// consumer and what the waiting event waits for, and sets the gauge
// entoutbox_consumer_stalled{consumer,topic} to 1, until an event of the
// topic is applied again.

import (
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/entoutbox/entoutbox/events"
)

type stallKey struct{ consumer, topic string }

// topicProgress is one consumer's progress on one topic in this instance.
type topicProgress struct {
	moved   time.Time // an event of the topic applied here, or waits began after a quiet spell
	waiting int       // deliveries of the topic waiting for their turn now
	quiet   time.Time // when waiting last fell to 0
	stalled bool      // said, and the gauge is 1
}

// stallWatch follows the topics on which deliveries wait.
type stallWatch struct {
	mu     sync.Mutex
	topics map[stallKey]*topicProgress
}

func (w *stallWatch) progress(m events.Meta) *topicProgress {
	k := stallKey{m.Consumer, m.Topic}
	if w.topics == nil {
		w.topics = map[stallKey]*topicProgress{}
	}
	p := w.topics[k]
	if p == nil {
		p = &topicProgress{moved: time.Now()}
		w.topics[k] = p
	}
	return p
}

// waitBegins counts a delivery of m's topic that waits for its turn until
// the returned func is called. Waits that begin after a spell of quiet
// longer than quietFor (nothing waited, nothing applied) start the clock
// anew: only waits without progress since count.
func (w *stallWatch) waitBegins(m events.Meta, quietFor time.Duration) (ends func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.progress(m)
	if p.waiting == 0 && !p.stalled && time.Since(p.quiet) > quietFor && time.Since(p.moved) > quietFor {
		p.moved = time.Now()
	}
	p.waiting++
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if p.waiting--; p.waiting == 0 {
			p.quiet = time.Now()
		}
	}
}

// applied records that an event of the consumer's topic was applied,
// here or by another instance; it returns true when the topic was said to
// be stalled.
func (w *stallWatch) applied(consumer, topic string) (wasStalled bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.topics[stallKey{consumer, topic}]
	if p == nil {
		return false
	}
	p.moved = time.Now()
	wasStalled, p.stalled = p.stalled, false
	return wasStalled
}

// stalledNow marks m's topic stalled when it has waited without progress
// for after, and tells whether this call did (to say it once).
func (w *stallWatch) stalledNow(m events.Meta, after time.Duration) (since time.Time, now bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.progress(m)
	if p.stalled || p.waiting == 0 || time.Since(p.moved) < after {
		return p.moved, false
	}
	p.stalled = true
	return p.moved, true
}

// checkStall, called by a delivery that waits for seq want of its
// aggregate, says once that m's topic is stalled when it is.
func (s *Set) checkStall(m events.Meta, want int64) {
	if s.cfg.StallAfter <= 0 {
		return
	}
	since, now := s.stalls.stalledNow(m, s.cfg.StallAfter)
	if !now {
		return
	}
	s.cfg.Metrics.Stalled(m.Consumer, m.Topic, true)
	warn(s.cfg.Logger, fmt.Sprintf("consumer %s is stalled on topic %s: it holds events that wait and has applied none for %s; "+
		"seq %d of aggregate %s/%s waits for seq %d (look at `entoutbox status`, the dead letters, and the instances' broker connections)",
		m.Consumer, m.Topic, time.Since(since).Round(time.Second), m.AggregateSeq, m.AggregateType, m.AggregateID, want),
		watermill.LogFields{"consumer": m.Consumer, "topic": m.Topic, "aggregate_type": m.AggregateType,
			"aggregate_id": m.AggregateID, "seq": m.AggregateSeq, "waiting_for_seq": want,
			"stalled_for": time.Since(since).Round(time.Second).String()})
}

// appliedOnTopic records progress on the consumer's topic, and says so
// when it had been said to be stalled.
func (s *Set) appliedOnTopic(consumer, topic string) {
	if !s.stalls.applied(consumer, topic) {
		return
	}
	s.cfg.Metrics.Stalled(consumer, topic, false)
	s.cfg.Logger.Info(fmt.Sprintf("consumer %s moves again on topic %s", consumer, topic),
		watermill.LogFields{"consumer": consumer, "topic": topic})
}

// warn logs at warning level where the adapter has one (Watermill's
// LoggerAdapter has none), else at error level.
func warn(l watermill.LoggerAdapter, msg string, fields watermill.LogFields) {
	if w, ok := l.(interface {
		Warn(msg string, fields watermill.LogFields)
	}); ok {
		w.Warn(msg, fields)
		return
	}
	l.Error(msg, errStalled, fields)
}

var errStalled = fmt.Errorf("consumer stalled")
