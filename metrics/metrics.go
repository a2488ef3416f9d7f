package metrics

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Label values of the counters, kept here so that every caller spells them
// alike.
const (
	ResultOK    = "ok"
	ResultError = "error"

	ResultHandled      = "handled"
	ResultDuplicate    = "duplicate"
	ResultRetried      = "retried"
	ResultDeadLettered = "dead_lettered"

	ReasonMaxAttempts = "max_attempts"
	ReasonPermanent   = "permanent"
	ReasonMalformed   = "malformed"

	// Reasons a consumer sets an event aside for, beside max_attempts (its
	// handler failed MaxAttempts times) and malformed (its metadata or
	// payload cannot be read, a version newer than the code knows included).
	ReasonUnknownEvent    = "unknown_event"    // no declaration names the event
	ReasonHeld            = "held"             // its aggregate is held behind an earlier dead letter
	ReasonPreviousMissing = "previous_missing" // its aggregate's previous event never arrived
	ReasonTenant          = "tenant"           // it names no tenant, or one its consumer does not know
)

// Metrics holds the collectors registered by New. The relay, the
// consumers and Emit update them through its methods (which applications
// need not call); a nil *Metrics turns them all off, and each method is a
// no-op on nil.
type Metrics struct {
	relayPublished            *prometheus.CounterVec   // topic, result
	relayPublishDuration      *prometheus.HistogramVec // topic
	relayDeliveryLag          *prometheus.HistogramVec // topic
	scheduledLateness         *prometheus.HistogramVec // topic
	scheduledPromoted         prometheus.Counter
	scheduledPromoteFailures  prometheus.Counter
	relayRetries              *prometheus.CounterVec // topic
	relayDeadLettered         *prometheus.CounterVec // reason
	relayClaimDuration        prometheus.Histogram
	relayClaimRows            prometheus.Histogram
	relayLeaseRenewalFailures prometheus.Counter
	relayPartitionsOwned      prometheus.GaugeFunc

	consumerDeliveries      *prometheus.CounterVec   // consumer, event, result
	consumerDeadLettered    *prometheus.CounterVec   // consumer, reason
	consumerHandlerDuration *prometheus.HistogramVec // consumer, event
	consumerEventAge        *prometheus.HistogramVec // consumer, event
	consumerRedeliveries    *prometheus.CounterVec   // consumer
	consumerGapWaits        *prometheus.CounterVec   // consumer
	consumerShedTurns       *prometheus.CounterVec   // consumer
	consumerStalled         *prometheus.GaugeVec     // consumer, topic
	consumerBatchEvents     prometheus.Histogram
	emitEvents              *prometheus.CounterVec // event

	backlog          *backlogCollector
	lag              *lagCollector
	partitionsMu     sync.Mutex
	partitionSources map[*int]func() int
}

// latencyBuckets suit publishes, claims and handlers: 1 ms to 10 s.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// lagBuckets suit the time an event waits, from its write to its
// delivery or handling: 5 ms to 1 h.
var lagBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// latenessBuckets suit how late a scheduled event is sent: 1 ms (on
// time) to 1 h (no relay ran meanwhile).
var latenessBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// New creates the collectors and registers them on reg. Nothing is
// registered anywhere else: pass prometheus.DefaultRegisterer to use the
// default registry. The backlog gauges report nothing until WatchBacklog
// is given the database.
func New(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("metrics: registerer is nil")
	}
	m := &Metrics{
		backlog:          newBacklogCollector(),
		lag:              newLagCollector(),
		partitionSources: map[*int]func() int{},
	}
	m.newRelayMetrics()
	m.newConsumerMetrics()
	m.emitEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "entoutbox_emit_events_total",
		Help: "Events emitted, counted once their transaction committed, by event name.",
	}, []string{"event"})
	m.relayPartitionsOwned = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "entoutbox_relay_partitions_owned",
		Help: "Partitions the fast relays of this process own.",
	}, m.partitionsOwned)
	for _, c := range []prometheus.Collector{
		m.relayPublished, m.relayPublishDuration, m.relayDeliveryLag, m.scheduledLateness, m.scheduledPromoted,
		m.scheduledPromoteFailures, m.relayRetries, m.relayDeadLettered,
		m.relayClaimDuration, m.relayClaimRows, m.relayLeaseRenewalFailures, m.relayPartitionsOwned,
		m.consumerDeliveries, m.consumerDeadLettered, m.consumerHandlerDuration, m.consumerEventAge, m.consumerRedeliveries,
		m.consumerGapWaits, m.consumerShedTurns, m.consumerStalled, m.consumerBatchEvents, m.emitEvents, m.backlog,
		m.lag,
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: registering: %w", err)
		}
	}
	return m, nil
}

// newRelayMetrics creates the relay's and the scheduler's metrics.
func (m *Metrics) newRelayMetrics() {
	m.relayPublished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "entoutbox_relay_published_total",
		Help: "Publishes of outbox events to the broker, by outbox topic and result (ok, error).",
	}, []string{"topic", "result"})
	m.relayPublishDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "entoutbox_relay_publish_duration_seconds",
		Help:    "How long a publish to the broker took, until it acknowledged or failed, by outbox topic.",
		Buckets: latencyBuckets,
	}, []string{"topic"})
	m.relayDeliveryLag = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "entoutbox_relay_delivery_lag_seconds",
		Help:    "Time from an event's write (its row's created_at) to the broker's acknowledgement, by outbox topic.",
		Buckets: lagBuckets,
	}, []string{"topic"})
	m.scheduledLateness = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "entoutbox_scheduled_lateness_seconds",
		Help: "Time from a scheduled event's due time (events.DeliverAt, by the database's clock) to the broker's " +
			"acknowledgement (by the relay's clock), by outbox topic.",
		Buckets: latenessBuckets,
	}, []string{"topic"})
	m.scheduledPromoted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "entoutbox_scheduled_promoted_total",
		Help: "Scheduled events this process's relay moved into the outbox once due, where they take their place in their aggregate's order.",
	})
	m.scheduledPromoteFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "entoutbox_scheduled_promote_failures_total",
		Help: "Failed attempts of this process's relay to move due scheduled events into the outbox (retried with backoff).",
	})
	m.relayRetries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "entoutbox_relay_retries_total",
		Help: "Failed publishes that will be tried again, by outbox topic.",
	}, []string{"topic"})
	m.relayDeadLettered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "entoutbox_relay_dead_lettered_total",
		Help: "Outbox rows the relay set aside as dead letters, by reason (max_attempts, permanent, malformed).",
	}, []string{"reason"})
	m.relayClaimDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "entoutbox_relay_claim_duration_seconds",
		Help:    "How long a claim of outbox rows took (fast path).",
		Buckets: latencyBuckets,
	})
	m.relayClaimRows = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "entoutbox_relay_claim_rows",
		Help:    "Rows one claim took (fast path).",
		Buckets: []float64{0, 1, 5, 10, 25, 50, 100, 250, 500, 1000},
	})
	m.relayLeaseRenewalFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "entoutbox_relay_lease_renewal_failures_total",
		Help: "Failed renewals of the partitions' leases (fast path).",
	})
}

// newConsumerMetrics creates the consumers' metrics.
func (m *Metrics) newConsumerMetrics() {
	m.consumerDeliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "entoutbox_consumer_deliveries_total",
		Help: "Handler runs by consumer, event and result (handled, duplicate, retried, dead_lettered).",
	}, []string{"consumer", "event", "result"})
	m.consumerDeadLettered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "entoutbox_consumer_dead_lettered_total",
		Help: "Events a consumer set aside as dead letters, by consumer and reason (max_attempts, malformed, " +
			"unknown_event, held, previous_missing).",
	}, []string{"consumer", "reason"})
	m.consumerHandlerDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "entoutbox_consumer_handler_duration_seconds",
		Help:    "How long one try of a handler took, its transaction included, by consumer and event.",
		Buckets: latencyBuckets,
	}, []string{"consumer", "event"})
	m.consumerEventAge = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "entoutbox_consumer_event_age_seconds",
		Help:    "Time from an event's write to its handling, by consumer and event.",
		Buckets: lagBuckets,
	}, []string{"consumer", "event"})
	m.consumerRedeliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "entoutbox_consumer_redeliveries_total",
		Help: "Messages the broker delivered again (a delivery count above 1), by consumer: after a fault " +
			"(an instance killed or too slow to ack, a nack), never in normal running.",
	}, []string{"consumer"})
	m.consumerGapWaits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "entoutbox_consumer_gap_waits_total",
		Help: "Deliveries that came before their aggregate's previous event was applied and waited for it, by consumer.",
	}, []string{"consumer"})
	m.consumerShedTurns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "entoutbox_consumer_shed_turns_total",
		Help: "Waiting deliveries nacked, to come again later, to free a full window for their aggregate's earlier events, by consumer.",
	}, []string{"consumer"})
	m.consumerStalled = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "entoutbox_consumer_stalled",
		Help: "1 while this instance has applied no event of the topic for StallAfter though it holds some that wait, by consumer and topic.",
	}, []string{"consumer", "topic"})
	m.consumerBatchEvents = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "entoutbox_consumer_batch_events",
		Help:    "Events one handler transaction applied (batches; 1 = one event alone).",
		Buckets: []float64{1, 2, 5, 10, 25, 50, 100, 250, 500},
	})
}

// WatchPartitions adds owned, read on every scrape, to
// entoutbox_relay_partitions_owned (the sum over every source watched); the
// function it returns removes it. The relay calls it while it runs.
func (m *Metrics) WatchPartitions(owned func() int) (unwatch func()) {
	if m == nil {
		return func() {}
	}
	key := new(int)
	m.partitionsMu.Lock()
	m.partitionSources[key] = owned
	m.partitionsMu.Unlock()
	return func() {
		m.partitionsMu.Lock()
		delete(m.partitionSources, key)
		m.partitionsMu.Unlock()
	}
}

func (m *Metrics) partitionsOwned() float64 {
	m.partitionsMu.Lock()
	sources := make([]func() int, 0, len(m.partitionSources))
	for _, f := range m.partitionSources {
		sources = append(sources, f)
	}
	m.partitionsMu.Unlock()
	n := 0
	for _, f := range sources {
		n += f()
	}
	return float64(n)
}

// Published records a publish of topic that took d.
func (m *Metrics) Published(topic string, d time.Duration, err error) {
	if m == nil {
		return
	}
	result := ResultOK
	if err != nil {
		result = ResultError
	}
	m.relayPublished.WithLabelValues(topic, result).Inc()
	m.relayPublishDuration.WithLabelValues(topic).Observe(d.Seconds())
}

// Delivered records the lag of an event of topic written at created,
// acknowledged now.
func (m *Metrics) Delivered(topic string, created time.Time) {
	if m == nil || created.IsZero() {
		return
	}
	m.relayDeliveryLag.WithLabelValues(topic).Observe(max(time.Since(created).Seconds(), 0))
}

// ScheduledDelivered records the lateness of a scheduled event of topic
// due at deliverAt, acknowledged now; nothing for a zero deliverAt (an
// event sent when emitted). A clock of the relay's behind the database's
// shows as early: it counts as 0.
func (m *Metrics) ScheduledDelivered(topic string, deliverAt time.Time) {
	if m == nil || deliverAt.IsZero() {
		return
	}
	m.scheduledLateness.WithLabelValues(topic).Observe(max(time.Since(deliverAt).Seconds(), 0))
}

// ScheduledPromoted records n scheduled events moved into the outbox as due.
func (m *Metrics) ScheduledPromoted(n int) {
	if m == nil || n <= 0 {
		return
	}
	m.scheduledPromoted.Add(float64(n))
}

// ScheduledPromoteFailed records a failed attempt to move due scheduled
// events into the outbox.
func (m *Metrics) ScheduledPromoteFailed() {
	if m == nil {
		return
	}
	m.scheduledPromoteFailures.Inc()
}

// Retried records a failed publish of topic that will be tried again.
func (m *Metrics) Retried(topic string) {
	if m == nil {
		return
	}
	m.relayRetries.WithLabelValues(topic).Inc()
}

// DeadLettered records a row the relay set aside, for reason (one of the
// Reason constants).
func (m *Metrics) DeadLettered(reason string) {
	if m == nil {
		return
	}
	m.relayDeadLettered.WithLabelValues(reason).Inc()
}

// Claimed records a claim of rows that took d.
func (m *Metrics) Claimed(rows int, d time.Duration) {
	if m == nil {
		return
	}
	m.relayClaimDuration.Observe(d.Seconds())
	m.relayClaimRows.Observe(float64(rows))
}

// LeaseRenewalFailed records a failed renewal of the leases.
func (m *Metrics) LeaseRenewalFailed() {
	if m == nil {
		return
	}
	m.relayLeaseRenewalFailures.Inc()
}

// Delivery records one try of consumer's handler of event, with its result
// (one of the Result constants other than ok and error) and duration d;
// zero d records no duration (the handler did not run).
func (m *Metrics) Delivery(consumer, event, result string, d time.Duration) {
	if m == nil {
		return
	}
	m.consumerDeliveries.WithLabelValues(consumer, event, result).Inc()
	if d > 0 {
		m.consumerHandlerDuration.WithLabelValues(consumer, event).Observe(d.Seconds())
	}
}

// ConsumerDeadLettered records an event consumer set aside, for reason
// (one of the Reason constants a consumer uses).
func (m *Metrics) ConsumerDeadLettered(consumer, reason string) {
	if m == nil {
		return
	}
	m.consumerDeadLettered.WithLabelValues(consumer, reason).Inc()
}

// Handled records the age of an event written at created when consumer
// handled it.
func (m *Metrics) Handled(consumer, event string, created time.Time) {
	if m == nil || created.IsZero() {
		return
	}
	m.consumerEventAge.WithLabelValues(consumer, event).Observe(max(time.Since(created).Seconds(), 0))
}

// Redelivered records a message consumer received that the broker had
// delivered before.
func (m *Metrics) Redelivered(consumer string) {
	if m == nil {
		return
	}
	m.consumerRedeliveries.WithLabelValues(consumer).Inc()
}

// WaitedForTurn records a delivery to consumer that waited for its
// aggregate's previous event.
func (m *Metrics) WaitedForTurn(consumer string) {
	if m == nil {
		return
	}
	m.consumerGapWaits.WithLabelValues(consumer).Inc()
}

// ShedTurn records a waiting delivery to consumer nacked to free a full
// window for its aggregate's earlier events.
func (m *Metrics) ShedTurn(consumer string) {
	if m == nil {
		return
	}
	m.consumerShedTurns.WithLabelValues(consumer).Inc()
}

// Stalled sets whether consumer makes no progress on topic though it
// holds events of it that wait.
func (m *Metrics) Stalled(consumer, topic string, stalled bool) {
	if m == nil {
		return
	}
	v := 0.0
	if stalled {
		v = 1
	}
	m.consumerStalled.WithLabelValues(consumer, topic).Set(v)
}

// Batch records a handler transaction that applied n events.
func (m *Metrics) Batch(n int) {
	if m == nil {
		return
	}
	m.consumerBatchEvents.Observe(float64(n))
}

// Emitted records n events named event whose transaction committed.
func (m *Metrics) Emitted(event string, n int) {
	if m == nil {
		return
	}
	m.emitEvents.WithLabelValues(event).Add(float64(n))
}
