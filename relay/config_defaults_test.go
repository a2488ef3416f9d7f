package relay

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// With nothing set, each path takes its own defaults.
func TestEachPathTakesItsDefaults(t *testing.T) {
	t.Parallel()
	resolve := func(c Config, path Path) Config { c.Path = path; c.setDefaults(); return c }
	fast, compatible, wal := resolve(Config{}, PathFast), resolve(Config{}, PathCompatible), resolve(Config{}, PathWAL)
	require.Equal(t, []any{DefaultBatchSize, DefaultPollInterval, DefaultRetryInterval, DefaultConcurrency},
		[]any{fast.BatchSize, fast.PollInterval, fast.RetryInterval, fast.Concurrency})
	require.Equal(t, []any{DefaultCompatibleBatchSize, DefaultCompatiblePollInterval, DefaultCompatibleRetryInterval, DefaultConsumerGroup},
		[]any{compatible.BatchSize, compatible.PollInterval, compatible.RetryInterval, compatible.Compatible.ConsumerGroup})
	require.Equal(t, []any{DefaultBatchSize, DefaultRetryInterval, DefaultMaxAttempts, int64(DefaultMaxBytesInFlight), "outbox_events_wal"},
		[]any{wal.BatchSize, wal.RetryInterval, wal.MaxAttempts, wal.MaxBytesInFlight, wal.WAL.Slot})
}

// A RetryInterval above the default MaxBackoff is capped by it, as it
// always was, on the fast and wal paths alike; the fast Subscriber the
// relay builds does not refuse it as a MaxBackoff below RetryInterval.
func TestRetryIntervalAboveTheDefaultMaxBackoff(t *testing.T) {
	t.Parallel()
	for _, path := range []Path{PathFast, PathWAL} {
		c := Config{Path: path, RetryInterval: time.Minute}
		c.setDefaults()
		require.Equal(t, DefaultMaxBackoff, c.backoff(1), path)
		if path == PathFast {
			sc := c.subscriberConfig()
			require.NoError(t, sc.validate("SubscriberConfig."))
			sc.setDefaults()
			require.Equal(t, DefaultMaxBackoff, sc.backoff(1))
		}
	}
}
