package relay_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/relay"
)

// uniquePrefix keeps each test's topics, streams and queues apart on the
// shared local brokers.
func uniquePrefix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b) + "_"
}

// brokerURLs are the brokers the relay is tested against: the local
// servers, an in-process Kafka (kfake) and PostgreSQL itself.
var brokerURLs = []struct {
	name    string
	service string // what to start when it is not reachable; "" when in process
	url     func(t *testing.T) string
}{
	{"mem", "", func(*testing.T) string { return "mem://" }},
	{"nats", "NATS JetStream at 127.0.0.1:4222", func(*testing.T) string { return "nats://127.0.0.1:4222" }},
	{"amqp", "RabbitMQ at 127.0.0.1:5672", func(*testing.T) string { return "amqp://guest:guest@127.0.0.1:5672/" }},
	{"redis", "Redis at 127.0.0.1:6379", func(*testing.T) string { return "redis://127.0.0.1:6379/0" }},
	{"kafka", "", func(t *testing.T) string {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(3))
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return "kafka://" + strings.Join(c.ListenAddrs(), ",")
	}},
	{"postgres", "", func(t *testing.T) string { return pgtest.New(t).URL }},
}

func openBroker(t *testing.T, url, service string) broker.Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := broker.Open(ctx, url, broker.Options{})
	if err != nil && service != "" {
		pgtest.Unavailable(t, service, err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// Every broker: N committed events arrive as N distinct ids, none from a
// rolled-back transaction, in order per aggregate, with their metadata.
func TestRelayToEveryBroker(t *testing.T) {
	t.Parallel()
	for _, tc := range brokerURLs {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			forPaths(t, func(t *testing.T, p *onPath) {
				testRelayToBroker(t, p, tc.url(t), tc.service)
			})
		})
	}
}

func testRelayToBroker(t *testing.T, p *onPath, url, service string) {
	b := p.emitBundle
	br := openBroker(t, url, service)
	prefix := uniquePrefix()
	got := receiveOn(t, br, prefix)

	want := emitOrders(t, b.client, 60, 6, 4)
	stop := runRelay(t, p.config(relay.Config{Publisher: br.Publisher(), TopicPrefix: prefix}))
	got.waitFor(t, want, patience)
	require.NoError(t, stop())
	time.Sleep(200 * time.Millisecond) // let a stray duplicate show up
	got.requireExactly(t, want)
	got.requireRowIDs(t, b.db.DB)
	for id := range want.ids {
		requirePayload(t, got.msgs[id])
		require.NotEmpty(t, got.msgs[id].Metadata.Get("correlation_id"), "headers travel as metadata")
	}
}
