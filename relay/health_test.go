package relay_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/tcpproxy"
	"github.com/entoutbox/entoutbox/relay"
)

// insertRow writes an outbox row by hand, as a careless producer could: the
// generator and Emit would refuse what these tests need.
func insertRow(t *testing.T, b *emitBundle, topic, aggregate string, payload string) string {
	t.Helper()
	id := uuid.NewString()
	_, err := b.db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type,
		aggregate_id, payload) VALUES ($1, 'order.paid', 1, $2, 'Order', $3, $4::jsonb)`, id, topic, aggregate, payload)
	require.NoError(t, err)
	return id
}

type deadLetter struct {
	reason   string
	attempts int
}

func deadLetters(t *testing.T, b *emitBundle) map[string]deadLetter {
	t.Helper()
	rows, err := b.db.DB.Query(`SELECT event_id, reason, attempts FROM outbox_dead_letters`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]deadLetter{}
	for rows.Next() {
		var id string
		var d deadLetter
		require.NoError(t, rows.Scan(&id, &d.reason, &d.attempts))
		out[id] = d
	}
	require.NoError(t, rows.Err())
	return out
}

// Five rows NATS refuses (larger than its maximum payload), with no other
// traffic at all: the broker answers its health probe, so each failure
// counts and each row reaches the dead letters after MaxAttempts, instead
// of being taken for an outage and retried for ever.
func TestIdlePoisonRowsReachTheDeadLetters(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	nats := openBroker(t, "nats://127.0.0.1:4222", "NATS JetStream at 127.0.0.1:4222")
	prefix := uniquePrefix()
	big := `{"blob":"` + strings.Repeat("x", 2<<20) + `"}`
	poison := map[string]bool{}
	for i := range 5 {
		poison[insertRow(t, b, "orders", fmt.Sprintf("big-%d", i), big)] = true
	}
	cfg := quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: nats.Publisher(), TopicPrefix: prefix,
		MaxAttempts: 3})
	runRelay(t, cfg)
	waitDelivered(t, b, 5)
	for id, d := range deadLetters(t, b) {
		require.True(t, poison[id], "unexpected dead letter %s", id)
		require.Equal(t, 3, d.attempts, "dead letter %s", id)
		require.Contains(t, d.reason, "maximum payload", "dead letter %s", id)
		require.True(t, strings.HasSuffix(d.reason, "(after 3 attempts)"), "dead letter %s: %s", id, d.reason)
	}
}

// A row whose topic no broker of the kind can take (a NATS wildcard) is
// refused for good: it goes to the dead letters at once, with the reason,
// and creates nothing on the broker; its aggregate's next row goes on.
func TestRowWithInvalidTopicIsDeadLetteredAtOnce(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	nats := openBroker(t, "nats://127.0.0.1:4222", "NATS JetStream at 127.0.0.1:4222")
	prefix := uniquePrefix()
	got := receiveAll(t, nats, prefix+"consumer", prefix+"orders")

	bad := insertRow(t, b, "orders.>", "order-1", `{"order_id":1}`)
	good := insertRow(t, b, "orders", "order-1", `{"order_id":1}`)
	// A long retry interval: a retry before the dead letter would show.
	cfg := quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: nats.Publisher(), TopicPrefix: prefix,
		MaxAttempts: 5})
	cfg.RetryInterval = time.Minute
	runRelay(t, cfg)
	require.Eventually(t, func() bool { return got.distinct() == 1 }, patience, 20*time.Millisecond)
	got.mu.Lock()
	require.Equal(t, 1, got.count[good])
	got.mu.Unlock()
	waitDelivered(t, b, 1)
	d := deadLetters(t, b)[bad]
	require.Equal(t, 1, d.attempts)
	require.Equal(t, `refused for good: broker: nats: invalid topic "`+prefix+`orders.>": "*" and ">" are NATS wildcards; a topic is one literal subject`, d.reason)
}

// While the broker is away every publish fails, for as long as it takes:
// none of those failures counts (the broker does not answer its health
// probe), so nothing reaches the dead letters however low MaxAttempts is,
// and everything is delivered once it is back. RabbitMQ, because its
// publishes fail at once while it is away (NATS ones wait for it).
func TestOutageFailuresDoNotCountTowardsMaxAttempts(t *testing.T) {
	t.Parallel()
	const amqpAddr = "127.0.0.1:5672"
	b := setupEmit(t)
	direct := openBroker(t, "amqp://guest:guest@"+amqpAddr+"/", "RabbitMQ at "+amqpAddr)
	proxy := tcpproxy.Start(t, amqpAddr)
	viaProxy := openBroker(t, "amqp://guest:guest@"+proxy.Addr+"/", "RabbitMQ through a local proxy")
	prefix := uniquePrefix()
	got := receiveAll(t, direct, prefix+"consumer", prefix+"orders")

	// One attempt only: a single counted failure would dead-letter a row.
	cfg := quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: viaProxy.Publisher(), TopicPrefix: prefix,
		MaxAttempts: 1})
	cfg.RetryInterval = 20 * time.Millisecond
	runRelay(t, cfg)
	first := emitOrders(t, b.client, 5, 5, 0)
	got.waitFor(t, first, patience)

	proxy.Cut()
	during := emitOrders(t, b.client, 10, 5, 0)
	// The oldest row of every aggregate has failed (the others wait behind
	// it), and none was counted.
	require.Eventually(t, func() bool {
		var tried int
		require.NoError(t, b.db.DB.QueryRow(`SELECT count(DISTINCT aggregate_id) FROM outbox_events
			WHERE delivered_at IS NULL AND last_error IS NOT NULL`).Scan(&tried))
		return tried == 5
	}, patience, 50*time.Millisecond, "every aggregate was tried during the outage")
	time.Sleep(500 * time.Millisecond) // more failures
	var counted int
	require.NoError(t, b.db.DB.QueryRow(`SELECT coalesce(max(attempts), 0) FROM outbox_events`).Scan(&counted))
	require.Zero(t, counted, "a failure during the outage counted as an attempt")
	require.Empty(t, deadLetters(t, b), "an outage sent events to the dead letters")
	proxy.Restore()
	got.waitFor(t, during, patience)
	waitDelivered(t, b, 0)
}

// The relay starts before any consumer on RabbitMQ, so no queue is bound to
// the exchange yet: RabbitMQ returns every publish as unroutable, nothing is
// marked delivered, and after its attempts each event is a dead letter
// saying why, and logged. Once a consumer group has declared its queue,
// events flow.
func TestRabbitMQUnroutableIsNeverMarkedDelivered(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	amqp := openBroker(t, "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ at 127.0.0.1:5672")
	prefix := uniquePrefix()
	logs := newCaptureLogs()
	cfg := quick(relay.PathFast, relay.Config{DB: b.db.DB, Publisher: amqp.Publisher(), TopicPrefix: prefix, Logger: logs,
		MaxAttempts: 3, Fast: relay.FastConfig{RelayID: prefix + "relay"}})
	cfg.RetryInterval = 20 * time.Millisecond
	runRelay(t, cfg)
	lost := emitOrders(t, b.client, 5, 5, 0)
	waitDelivered(t, b, 5)
	var delivered int
	require.NoError(t, b.db.DB.QueryRow(`SELECT count(*) FROM outbox_events WHERE delivered_at IS NOT NULL`).Scan(&delivered))
	require.Zero(t, delivered, "events marked delivered that no queue received")
	letters := deadLetters(t, b)
	for id := range lost.ids {
		d, ok := letters[id]
		require.True(t, ok, "event %s is not a dead letter", id)
		require.Contains(t, d.reason, "returned unroutable (NO_ROUTE): no queue is bound")
		require.Equal(t, 3, d.attempts)
	}
	require.Equal(t, 5, requireDeadLettersLogged(t, b, logs, relay.PathFast, prefix+"relay/"))

	got := receiveAll(t, amqp, prefix+"billing", prefix+"orders")
	later := emitOrders(t, b.client, 5, 5, 0)
	got.waitFor(t, later, patience)
	waitDelivered(t, b, 5)
}
