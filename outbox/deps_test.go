package outbox_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/metrics"
	"github.com/entoutbox/entoutbox/outbox"
)

// The metrics package's Metrics is what SetMetrics takes.
var _ outbox.EmitCounter = (*metrics.Metrics)(nil)

// A producer, which only emits, carries neither the relay nor the brokers
// nor Watermill's forwarder, requeuer, router middleware or SQL Pub/Sub, nor
// pgx's database/sql driver: the generated ent package imports this
// package and the consumer runtime, not the relay, and the writer builds
// its INSERT itself.
func TestProducerDoesNotCarryTheRelay(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/entoutbox/entoutbox/internal/testent").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, dep := range strings.Fields(string(out)) {
		require.NotEqual(t, "github.com/entoutbox/entoutbox/relay", dep)
		require.NotEqual(t, "github.com/entoutbox/entoutbox/broker", dep)
		require.NotEqual(t, "github.com/ThreeDotsLabs/watermill/components/forwarder", dep)
		require.NotEqual(t, "entgo.io/ent/entc/gen", dep)
		require.NotEqual(t, "github.com/ThreeDotsLabs/watermill/components/requeuer", dep)
		require.NotEqual(t, "github.com/ThreeDotsLabs/watermill/message/router/middleware", dep)
		require.NotEqual(t, "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql", dep)
		require.NotEqual(t, "github.com/jackc/pgx/v5/stdlib", dep)
	}
}

// The outbox package counts what it emits through EmitCounter, not the
// metrics package: a producer that never turns emit metrics on carries
// neither it nor Prometheus.
func TestOutboxDoesNotCarryMetrics(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/entoutbox/entoutbox/outbox").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, dep := range strings.Fields(string(out)) {
		require.NotEqual(t, "github.com/entoutbox/entoutbox/metrics", dep)
		require.False(t, strings.HasPrefix(dep, "github.com/prometheus/"), "outbox depends on %s", dep)
	}
}
