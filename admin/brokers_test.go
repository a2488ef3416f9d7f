package admin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/entoutbox/entoutbox/admin"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/internal/testent/consumerposition"
	"github.com/entoutbox/entoutbox/internal/testent/invoice"
	"github.com/entoutbox/entoutbox/internal/testent/processedevent"
)

// brokers are every broker the project opens by URL: the local servers,
// an in-process Kafka (kfake), PostgreSQL itself and the in-process one.
var brokers = []struct {
	name    string
	service string // what to start when it is not reachable; "" when in process
	url     func(t *testing.T) string
}{
	{"nats", "NATS JetStream at 127.0.0.1:4222", func(*testing.T) string { return "nats://127.0.0.1:4222" }},
	{"amqp", "RabbitMQ at 127.0.0.1:5672", func(*testing.T) string { return amqpURL }},
	{"redis", "Redis at 127.0.0.1:6379", func(*testing.T) string { return "redis://127.0.0.1:6379/0" }},
	{"kafka", "", func(t *testing.T) string {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(3))
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return "kafka://" + strings.Join(c.ListenAddrs(), ",")
	}},
	{"postgres", "", func(t *testing.T) string { return pgtest.New(t).URL }},
	{"mem", "", func(*testing.T) string { return "mem://" }},
}

// A dead letter retried, and events replayed, seconds after the first
// delivery reach the consumers on every broker: JetStream drops a message
// whose Nats-Msg-Id it stored within its duplicate window (2 minutes), so
// the broker's id of a retry or replay must differ from the original's
// while the event id consumers dedupe on stays the same. Before that, the
// retry said "requeued", the relay counted the publish as delivered, and
// no consumer ever handled it.
func TestRetryAndReplayWithinTheDuplicateWindow(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			retryAndReplayOn(t, b.url(t), b.service)
		})
	}
}

func retryAndReplayOn(t *testing.T, url, service string) {
	e := setupOn(t, url, service)
	ctx := context.Background()
	billingCalls, auditCalls, broken := e.consumeInvoices(t)
	e.relay(t, e.broker.Publisher())

	// The retry and replays must be sent within JetStream's duplicate
	// window of the first publish (logged below when a slow machine took
	// longer); how long their delivery then takes does not matter: one the
	// broker dropped never comes.
	const wait = patience
	start := time.Now()
	id := e.emit(t, "1", testent.OrderPaid{OrderID: 1, AmountCents: 100})
	d := e.letter(t, "billing")
	require.Eventually(t, func() bool { return e.invoices("audit") == 1 }, wait, 10*time.Millisecond)
	// Consumers may handle the event before the relay marks its row
	// delivered; a retry before that is rightly "already pending".
	e.deliveredOnce(t, id)

	// The retry, at once: the handler runs and its effect is there.
	broken.Store(false)
	billingBefore := billingCalls.Load()
	rs, err := e.admin.Retry(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, admin.Requeued, rs[0].Outcome)
	require.Eventually(t, func() bool { return e.invoices("billing") == 1 }, wait, 10*time.Millisecond,
		"the retried event never reached the billing consumer")
	e.deliveredOnce(t, id)

	// A replay, twice, for a consumer whose read model was rebuilt (its
	// effects, processed events and positions cleared): it handles the
	// event each time.
	for i := 1; i <= 2; i++ {
		// Read before the clearing: the retry's copy of the event may reach
		// audit only after it (a broker that polls, a busy machine), and
		// is then handled as new, the replay's copy being its duplicate.
		// Either way audit handles the event once more, and only once.
		before := auditCalls.Load()
		e.client.Invoice.Delete().Where(invoice.Consumer("audit")).ExecX(ctx)
		e.client.ProcessedEvent.Delete().Where(processedevent.Consumer("audit")).ExecX(ctx)
		e.client.ConsumerPosition.Delete().Where(consumerposition.Consumer("audit")).ExecX(ctx)
		n, err := e.admin.Replay(ctx, e.broker.Publisher(), admin.Range{Events: []string{"order.paid"}},
			admin.ReplayOptions{TopicPrefix: e.prefix})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Eventually(t, func() bool { return e.invoices("audit") == 1 }, wait, 10*time.Millisecond,
			"replay %d never reached the audit consumer", i)
		require.Equal(t, before+1, auditCalls.Load(), "replay %d: audit handled the event once", i)
	}
	if took := time.Since(start); took > 2*time.Minute {
		t.Logf("the retry and replays ran %s after the first delivery, past JetStream's duplicate window: "+
			"on NATS this run did not test the window", took)
	}

	time.Sleep(300 * time.Millisecond) // room for a second delivery, if any
	require.Equal(t, 1, e.invoices("billing"), "billing's effect once")
	require.Equal(t, billingBefore+1, billingCalls.Load(), "billing handled the retried event once")
}
