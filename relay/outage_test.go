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
// nothing committed is lost and delivery resumes by itself.
func TestRelaySurvivesBrokerOutage(t *testing.T) {
	t.Parallel()
	forPaths(t, testRelaySurvivesBrokerOutage)
}

func testRelaySurvivesBrokerOutage(t *testing.T, path relay.Path) {
	const natsAddr = "127.0.0.1:4222"
	b := setupEmit(t)
	direct := openBroker(t, "nats://"+natsAddr, "NATS JetStream at "+natsAddr)
	proxy := tcpproxy.Start(t, natsAddr)
	viaProxy := openBroker(t, "nats://"+proxy.Addr, "NATS JetStream through a local proxy")

	prefix := uniquePrefix()
	got := receiveOn(t, direct, prefix)
	ctx := context.Background()

	stop := runRelay(t, quick(path, relay.Config{DB: b.db.DB, Publisher: viaProxy.Publisher(), TopicPrefix: prefix}))
	first := emitOrders(t, b.client, 20, 4, 0)
	got.waitFor(t, first, patience)

	proxy.Cut()
	during := emitOrders(t, b.client, 30, 4, 3)
	time.Sleep(2 * time.Second)
	backlog, err := relay.ReadBacklog(ctx, b.db.DB, "", "")
	require.NoError(t, err)
	require.Equal(t, int64(len(during.ids)), backlog.Pending, "nothing is delivered, nor lost, while the broker is away")
	proxy.Restore()

	got.waitFor(t, during, patience)
	waitDelivered(t, b, 0)
	require.NoError(t, stop())
	for id := range during.rolledBack {
		require.Zero(t, got.count[id], "rolled-back event %s delivered", id)
	}
}
