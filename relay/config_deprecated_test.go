package relay

import (
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A deprecated field is used on its own path when the setting that
// replaced it is zero; the new one wins when both are set; on another path
// the deprecated field is ignored, as it was before.
func TestDeprecatedSettingsAreTakenOnTheirPath(t *testing.T) {
	t.Parallel()
	listen := &sql.DB{}
	old := Config{
		Fast: FastConfig{Concurrency: 7, Subscriber: SubscriberConfig{BatchSize: 11, MaxBytesInFlight: 13, PollInterval: 17 * time.Millisecond,
			MaxAttempts: 19, InitialBackoff: 23 * time.Millisecond, MaxBackoff: 29 * time.Second, RelayID: "old", Lease: 31 * time.Second,
			Partitions: 37, PollOnly: true, ListenDB: listen, Delete: true, CloseTimeout: 41 * time.Second}},
		Compatible: CompatibleConfig{BatchSize: 43, PollInterval: 47 * time.Millisecond, RetryInterval: 53 * time.Millisecond},
		WAL: WALConfig{Concurrency: 59, MaxRowsInFlight: 61, MaxBytesInFlight: 67, MaxAttempts: 71,
			InitialBackoff: 73 * time.Millisecond, MaxBackoff: 79 * time.Second},
	}
	resolve := func(c Config, path Path) Config { c.Path = path; c.setDefaults(); return c }

	fast := resolve(old, PathFast)
	require.Equal(t, SubscriberConfig{Table: fast.Table, DeadLetterTable: fast.DeadLetterTable, Logger: fast.Logger,
		RelayID: "old", BatchSize: 11, MaxBytesInFlight: 13, Lease: 31 * time.Second, Partitions: 37,
		PollInterval: 17 * time.Millisecond, PollOnly: true, ListenDB: listen, Delete: true, MaxAttempts: 19,
		InitialBackoff: 23 * time.Millisecond, MaxBackoff: 29 * time.Second, CloseTimeout: 41 * time.Second}, fast.subscriberConfig())
	require.Equal(t, 7, fast.Concurrency)

	compatible := resolve(old, PathCompatible)
	require.Equal(t, []any{43, 47 * time.Millisecond, 53 * time.Millisecond},
		[]any{compatible.BatchSize, compatible.PollInterval, compatible.RetryInterval})
	require.Zero(t, compatible.Concurrency, "the fast and wal paths' settings are not taken in")

	wal := resolve(old, PathWAL)
	require.Equal(t, []any{59, 61, int64(67), 71, 73 * time.Millisecond, 79 * time.Second},
		[]any{wal.Concurrency, wal.BatchSize, wal.MaxBytesInFlight, wal.MaxAttempts, wal.RetryInterval, wal.MaxBackoff})
	require.Zero(t, wal.PollInterval, "the wal path does not poll")

	// The new settings win over the deprecated ones.
	both := old
	both.Concurrency, both.BatchSize, both.RetryInterval, both.MaxAttempts = 2, 3, 5*time.Millisecond, 4
	both.Fast.Lease = 6 * time.Second
	for _, path := range []Path{PathFast, PathWAL} {
		c := resolve(both, path)
		require.Equal(t, []any{2, 3, 5 * time.Millisecond, 4}, []any{c.Concurrency, c.BatchSize, c.RetryInterval, c.MaxAttempts}, path)
	}
	require.Equal(t, 6*time.Second, resolve(both, PathFast).subscriberConfig().Lease)
	c := resolve(both, PathCompatible)
	require.Equal(t, []any{3, 5 * time.Millisecond}, []any{c.BatchSize, c.RetryInterval})

	// Nothing set: each path's defaults.
	fast, compatible, wal = resolve(Config{}, PathFast), resolve(Config{}, PathCompatible), resolve(Config{}, PathWAL)
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
