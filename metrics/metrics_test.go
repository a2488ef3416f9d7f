package metrics_test

import (
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/metrics"
)

// recorder is a Registerer that keeps the descriptors it is given.
type recorder struct{ names []string }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 10)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		r.names = append(r.names, fqName.FindStringSubmatch(d.String())[1])
	}
	return nil
}
func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}
func (r *recorder) Unregister(prometheus.Collector) bool { return false }

// New registers exactly the metrics of the contract, on the registerer it
// is given only.
func TestNewRegistersTheContract(t *testing.T) {
	var r recorder
	_, err := metrics.New(&r)
	require.NoError(t, err)
	slices.Sort(r.names)
	require.Equal(t, []string{
		"entoutbox_backlog_sample_age_seconds",
		"entoutbox_backlog_sample_errors_total",
		"entoutbox_consumer_batch_events",
		"entoutbox_consumer_dead_lettered_total",
		"entoutbox_consumer_deliveries_total",
		"entoutbox_consumer_event_age_seconds",
		"entoutbox_consumer_gap_waits_total",
		"entoutbox_consumer_handler_duration_seconds",
		"entoutbox_consumer_held_aggregates",
		"entoutbox_consumer_lag_events",
		"entoutbox_consumer_lag_oldest_seconds",
		"entoutbox_consumer_redeliveries_total",
		"entoutbox_consumer_shed_turns_total",
		"entoutbox_consumer_stalled",
		"entoutbox_dead_letters",
		"entoutbox_emit_events_total",
		"entoutbox_outbox_oldest_pending_age_seconds",
		"entoutbox_outbox_pending_events",
		"entoutbox_relay_claim_duration_seconds",
		"entoutbox_relay_claim_rows",
		"entoutbox_relay_dead_lettered_total",
		"entoutbox_relay_delivery_lag_seconds",
		"entoutbox_relay_lease_renewal_failures_total",
		"entoutbox_relay_partitions_owned",
		"entoutbox_relay_publish_duration_seconds",
		"entoutbox_relay_published_total",
		"entoutbox_relay_retries_total",
		"entoutbox_relays_holding_partitions",
		"entoutbox_scheduled_cancelled_events",
		"entoutbox_scheduled_lateness_seconds",
		"entoutbox_scheduled_overdue_events",
		"entoutbox_scheduled_overdue_seconds",
		"entoutbox_scheduled_promote_failures_total",
		"entoutbox_scheduled_promoted_total",
		"entoutbox_scheduled_waiting_events",
		"entoutbox_wal_slot_active",
		"entoutbox_wal_slot_retained_bytes",
	}, r.names)

	reg := prometheus.NewPedanticRegistry()
	_, err = metrics.New(reg)
	require.NoError(t, err)
	_, err = metrics.New(reg)
	require.ErrorContains(t, err, "metrics: registering", "twice on one registry")
	_, err = metrics.New(nil)
	require.Error(t, err)
}

// recordOneOfEach records a series of each metric the relay and the
// consumers record.
func recordOneOfEach(m *metrics.Metrics) {
	m.Published("orders", time.Millisecond, nil)
	m.Delivered("orders", time.Now())
	m.ScheduledDelivered("orders", time.Now())
	m.Retried("orders")
	m.DeadLettered(metrics.ReasonMalformed)
	m.Claimed(1, time.Millisecond)
	m.LeaseRenewalFailed()
	m.Delivery("billing", "order.paid", metrics.ResultHandled, time.Millisecond)
	m.ConsumerDeadLettered("billing", metrics.ReasonHeld)
	m.Handled("billing", "order.paid", time.Now())
	m.Redelivered("billing")
	m.WaitedForTurn("billing")
	m.ShedTurn("billing")
	m.Stalled("billing", "orders", true)
	m.Batch(1)
	m.Emitted("order.paid", 1)
}

// A nil *Metrics is off: every method does nothing.
func TestNilMetricsIsOff(t *testing.T) {
	var m *metrics.Metrics
	recordOneOfEach(m)
	m.WatchPartitions(func() int { return 1 })()
	require.NoError(t, m.WatchBacklog(nil, metrics.BacklogConfig{}))
	require.NoError(t, m.BacklogError())
}
