package relay_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/pgschema"
	"github.com/entoutbox/entoutbox/internal/promtest"
	"github.com/entoutbox/entoutbox/internal/tcpproxy"
	"github.com/entoutbox/entoutbox/metrics"
	"github.com/entoutbox/entoutbox/relay"
)

// refusedForGood is an error the broker says no retry can cure.
type refusedForGood struct{}

func (refusedForGood) Error() string   { return "refused for good by the broker" }
func (refusedForGood) Permanent() bool { return true }

// poisonPublisher fails the publishes of one event always, and refuses
// another for good.
type poisonPublisher struct {
	message.Publisher
	poison, permanent string
}

func (p poisonPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		switch m.UUID {
		case p.poison:
			return errors.New("message rejected by the broker")
		case p.permanent:
			return refusedForGood{}
		}
	}
	return p.Publisher.Publish(topic, msgs...)
}

// After a real relay run the metrics hold what happened: every publish by
// result, the retries and dead letters of a poison event (by reason, a
// malformed row and a permanent refusal included), the lag of every
// delivered event, the claims, the partitions owned while it ran, and the
// backlog gauges sampled from the tables before and after.
func TestRelayMetricsAfterARun(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	pubsub, got := receiveInProcess(t, "orders")
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	require.NoError(t, m.WatchBacklog(b.db.DB, metrics.BacklogConfig{MinInterval: time.Millisecond}))

	want := emitOrders(t, b.client, 20, 4, 0)
	poison, permanent := want.perAggregate["order-1"][1], want.perAggregate["order-2"][2]
	for _, id := range []string{poison, permanent} {
		delete(want.ids, id)
	}
	_, err = b.db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type,
		aggregate_id, payload, headers) VALUES (gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', 'order-x',
		'{"order_id": 1}', '{"trace id": "x"}')`)
	require.NoError(t, err)

	require.Equal(t, 21.0, promtest.Value(t, reg, "entoutbox_outbox_pending_events", "topic", "orders"))
	require.Greater(t, promtest.Value(t, reg, "entoutbox_outbox_oldest_pending_age_seconds"), 0.0)
	require.Equal(t, 0.0, promtest.Value(t, reg, "entoutbox_relays_holding_partitions"))

	cfg := quick(relay.PathFast, relay.Config{DB: b.db.DB, Metrics: m,
		Publisher:   poisonPublisher{Publisher: pubsub, poison: poison, permanent: permanent},
		MaxAttempts: 3})
	cfg.RetryInterval = 10 * time.Millisecond
	stop := runRelay(t, cfg)
	got.waitFor(t, want, patience)
	waitDelivered(t, b, 3)
	require.Eventually(t, func() bool {
		return promtest.Value(t, reg, "entoutbox_relay_partitions_owned") > 0 &&
			promtest.Value(t, reg, "entoutbox_relays_holding_partitions") == 1
	}, patience, 10*time.Millisecond, "partitions owned while it runs")
	require.NoError(t, stop())

	v := func(name string, labels ...string) float64 { return promtest.Value(t, reg, name, labels...) }
	require.Equal(t, 18.0, v("entoutbox_relay_published_total", "topic", "orders", "result", "ok"))
	require.Equal(t, 4.0, v("entoutbox_relay_published_total", "topic", "orders", "result", "error"),
		"three tries of the poison, one of the refused event")
	require.Equal(t, 22.0, v("entoutbox_relay_publish_duration_seconds", "topic", "orders"))
	require.Equal(t, 18.0, v("entoutbox_relay_delivery_lag_seconds", "topic", "orders"))
	require.Greater(t, promtest.Sum(t, reg, "entoutbox_relay_delivery_lag_seconds", "topic", "orders"), 0.0)
	require.Equal(t, 2.0, v("entoutbox_relay_retries_total", "topic", "orders"), "the poison's first two tries")
	require.Equal(t, 1.0, v("entoutbox_relay_dead_lettered_total", "reason", "max_attempts"))
	require.Equal(t, 1.0, v("entoutbox_relay_dead_lettered_total", "reason", "permanent"))
	require.Equal(t, 1.0, v("entoutbox_relay_dead_lettered_total", "reason", "malformed"))
	require.GreaterOrEqual(t, v("entoutbox_relay_claim_duration_seconds"), 1.0)
	require.GreaterOrEqual(t, promtest.Sum(t, reg, "entoutbox_relay_claim_rows"), 21.0, "every row was claimed")
	require.Equal(t, 0.0, v("entoutbox_relay_lease_renewal_failures_total"))
	require.Equal(t, 0.0, v("entoutbox_relay_partitions_owned"), "a stopped relay owns nothing")

	require.Equal(t, 0.0, v("entoutbox_outbox_pending_events", "topic", "orders"))
	require.True(t, promtest.Present(t, reg, "entoutbox_outbox_pending_events", "topic", "orders"),
		"a topic with nothing pending reports 0")
	require.Equal(t, 0.0, v("entoutbox_outbox_oldest_pending_age_seconds"))
	require.Equal(t, 3.0, v("entoutbox_dead_letters", "source", "relay"))
	require.Equal(t, 0.0, v("entoutbox_dead_letters", "source", "consumer"))
	require.NoError(t, m.BacklogError())
}

// The backlog gauges sample at most once per MinInterval: scrapes in
// between see the last sample, whatever changed.
func TestBacklogIsSampledAtMostOncePerInterval(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	require.NoError(t, m.WatchBacklog(b.db.DB, metrics.BacklogConfig{MinInterval: time.Hour}))
	emitOrders(t, b.client, 2, 1, 0)
	require.Equal(t, 2.0, promtest.Value(t, reg, "entoutbox_outbox_pending_events", "topic", "orders"))
	emitOrders(t, b.client, 3, 1, 0)
	require.Equal(t, 2.0, promtest.Value(t, reg, "entoutbox_outbox_pending_events", "topic", "orders"), "cached")

	require.NoError(t, m.WatchBacklog(b.db.DB, metrics.BacklogConfig{MinInterval: time.Hour, MaxCount: 4}))
	require.Equal(t, 4.0, promtest.Value(t, reg, "entoutbox_outbox_pending_events", "topic", "orders"),
		"a count stops at MaxCount")
}

// Only open dead letters are counted, by the metrics and by ReadBacklog:
// those an operator discarded or retried are settled.
func TestBacklogCountsOpenDeadLettersOnly(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	require.NoError(t, m.WatchBacklog(b.db.DB, metrics.BacklogConfig{MinInterval: time.Millisecond}))
	_, err = b.db.DB.Exec(`INSERT INTO outbox_dead_letters (event_id, source, event_name, event_version, topic,
		aggregate_type, aggregate_id, payload, reason, attempts) VALUES
		(gen_random_uuid(), 'relay', 'order.paid', 1, 'orders', 'Order', 'a', '\x7b7d', 'x', 1),
		(gen_random_uuid(), 'relay', 'order.paid', 1, 'orders', 'Order', 'b', '\x7b7d', 'x', 1),
		(gen_random_uuid(), 'billing', 'order.paid', 1, 'orders', 'Order', 'c', '\x7b7d', 'x', 1)`)
	require.NoError(t, err)
	require.Equal(t, 2.0, promtest.Value(t, reg, "entoutbox_dead_letters", "source", "relay"))
	require.Equal(t, 1.0, promtest.Value(t, reg, "entoutbox_dead_letters", "source", "consumer"))

	backlog, err := relay.ReadBacklog(context.Background(), b.db.DB, "", "")
	require.NoError(t, err)
	require.EqualValues(t, 3, backlog.DeadLetters)

	_, err = b.db.DB.Exec(`UPDATE outbox_dead_letters SET discarded_at = now() WHERE aggregate_id IN ('a', 'c')`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return promtest.Value(t, reg, "entoutbox_dead_letters", "source", "relay") == 1 &&
			promtest.Value(t, reg, "entoutbox_dead_letters", "source", "consumer") == 0
	}, patience, 5*time.Millisecond)

	_, err = b.db.DB.Exec(`UPDATE outbox_dead_letters SET retried_at = now(), event_id = NULL WHERE aggregate_id = 'b'`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return promtest.Value(t, reg, "entoutbox_dead_letters", "source", "relay") == 0
	}, patience, 5*time.Millisecond, "a retried letter is settled")
	backlog, err = relay.ReadBacklog(context.Background(), b.db.DB, "", "")
	require.NoError(t, err)
	require.Zero(t, backlog.DeadLetters)
}

// A relay cut off from the database counts its failed lease renewals, and
// owns no partitions once it gave them up.
func TestRelayMetricsCountLeaseRenewalFailures(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	u, err := url.Parse(b.db.URL)
	require.NoError(t, err)
	proxy := tcpproxy.Start(t, u.Host)
	u.Host = proxy.Addr
	db, err := pgschema.Open(u.String())
	require.NoError(t, err)
	defer db.Close()
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	pubsub, _ := receiveInProcess(t, "orders")

	cfg := quick(relay.PathFast, relay.Config{DB: db, Publisher: pubsub, Metrics: m, CloseTimeout: time.Second,
		Fast: relay.FastConfig{Lease: 2 * time.Second}})
	runRelay(t, cfg)
	require.Eventually(t, func() bool { return promtest.Value(t, reg, "entoutbox_relay_partitions_owned") > 0 },
		patience, 10*time.Millisecond)
	require.Zero(t, promtest.Value(t, reg, "entoutbox_relay_lease_renewal_failures_total"))
	proxy.Cut()
	require.Eventually(t, func() bool {
		return promtest.Value(t, reg, "entoutbox_relay_lease_renewal_failures_total") >= 1 &&
			promtest.Value(t, reg, "entoutbox_relay_partitions_owned") == 0
	}, patience, 10*time.Millisecond, "renewals fail, and the partitions are given up")
}

// The compatible path reports its publishes, their lag and the rows it
// sets aside.
func TestCompatibleRelayMetrics(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	pubsub, got := receiveInProcess(t, "orders")
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	want := emitOrders(t, b.client, 5, 2, 0)
	_, err = b.db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type,
		aggregate_id, payload, headers) VALUES (gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', 'order-x',
		'{"order_id": 1}', '{"trace id": "x"}')`)
	require.NoError(t, err)
	stop := runRelay(t, quick(relay.PathCompatible, relay.Config{DB: b.db.DB, Publisher: pubsub, Metrics: m}))
	got.waitFor(t, want, patience)
	waitDelivered(t, b, 1)
	require.NoError(t, stop())
	v := func(name string, labels ...string) float64 { return promtest.Value(t, reg, name, labels...) }
	require.Equal(t, 5.0, v("entoutbox_relay_published_total", "topic", "orders", "result", "ok"))
	require.Equal(t, 5.0, v("entoutbox_relay_publish_duration_seconds", "topic", "orders"))
	require.Equal(t, 5.0, v("entoutbox_relay_delivery_lag_seconds", "topic", "orders"))
	require.Equal(t, 1.0, v("entoutbox_relay_dead_lettered_total", "reason", "malformed"))
}
