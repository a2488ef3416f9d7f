package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/tcpproxy"
	"github.com/entoutbox/entoutbox/relay"
)

// The broker goes away while events are being committed and comes back:
// nothing committed is lost, nothing is dead-lettered (an outage counts no
// attempt), and delivery resumes by itself. A relay stopped during an
// outage leaves what the broker did not ack to the next one.
func TestRelaySurvivesBrokerOutage(t *testing.T) {
	t.Parallel()
	forPaths(t, testRelaySurvivesBrokerOutage)
}

func testRelaySurvivesBrokerOutage(t *testing.T, p *onPath) {
	const natsAddr = "127.0.0.1:4222"
	direct := openBroker(t, "nats://"+natsAddr, "NATS JetStream at "+natsAddr)
	proxy := tcpproxy.Start(t, natsAddr)
	viaProxy := openBroker(t, "nats://"+proxy.Addr, "NATS JetStream through a local proxy")

	prefix := uniquePrefix()
	got := receiveOn(t, direct, prefix)
	ctx := context.Background()

	cfg := p.config(relay.Config{Publisher: viaProxy.Publisher(), TopicPrefix: prefix, CloseTimeout: 2 * time.Second})
	if p.path != relay.PathCompatible { // it has no attempts to count
		cfg.MaxAttempts = 3
	}
	stop := runRelay(t, cfg)
	first := emitOrders(t, p.client, 20, 4, 0)
	got.waitFor(t, first, patience)
	waitDelivered(t, p.emitBundle, 0)

	proxy.Cut()
	during := emitOrdersAs(t, p.client, "during", 30, 4, 3)
	time.Sleep(2 * time.Second)
	backlog, err := relay.ReadBacklog(ctx, p.db.DB, "", "")
	require.NoError(t, err)
	require.Equal(t, int64(len(during.ids)), backlog.Pending, "nothing is delivered, nor lost, while the broker is away")
	proxy.Restore()
	got.waitFor(t, during, patience)
	waitDelivered(t, p.emitBundle, 0)

	// Stopped in an outage: the next relay sends what was not acked.
	proxy.Cut()
	stopped := emitOrdersAs(t, p.client, "stopped", 30, 4, 0)
	time.Sleep(time.Second)
	require.NoError(t, stop())
	proxy.Restore()
	stop = runRelay(t, p.config(relay.Config{Publisher: direct.Publisher(), TopicPrefix: prefix}))
	got.waitFor(t, stopped, patience)
	waitDelivered(t, p.emitBundle, 0)
	require.NoError(t, stop())
	for id := range during.rolledBack {
		require.Zero(t, got.count[id], "rolled-back event %s delivered", id)
	}
}
