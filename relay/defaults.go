package relay

import (
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

// The defaults of Config, its FastConfig, CompatibleConfig and WALConfig,
// and SubscriberConfig, defined once; the command's flags show them. Where
// the read paths differ, each has its own: the compatible path keeps the
// stock watermill-sql subscriber's.
const (
	DefaultBatchSize           = 2000 // rows held at once, fast and wal paths
	DefaultCompatibleBatchSize = 100  // rows read at once, compatible path
	DefaultConcurrency         = 256  // publishes in flight, fast and wal paths
	DefaultLease               = 30 * time.Second
	DefaultPartitions          = 64
	DefaultMaxAttempts         = 10
	DefaultCloseTimeout        = 30 * time.Second // the relay's wait for publishes in flight
	// DefaultSubscriberCloseTimeout is how long a Subscriber's Close waits
	// for the messages it handed out (the relay has waited for its
	// publishes by then).
	DefaultSubscriberCloseTimeout = 2 * time.Second
	DefaultConsumerGroup          = "entoutbox_relay"

	DefaultPollInterval = 500 * time.Millisecond // fast path, without a notification
	// DefaultSQLitePollInterval is the poll path's: SQLite has no LISTEN,
	// so the poll interval is what wakes the relay (a commit waits half of
	// it on average), and a read of a local file costs little.
	DefaultSQLitePollInterval     = 100 * time.Millisecond
	DefaultCompatiblePollInterval = time.Second
	// DefaultRetryInterval is the fast and wal paths' first retry of a
	// failed publish; the wait doubles up to DefaultMaxBackoff.
	DefaultRetryInterval           = 100 * time.Millisecond
	DefaultCompatibleRetryInterval = time.Second // fixed, as the stock forwarder retries
	DefaultMaxBackoff              = 30 * time.Second
)

// defaultLogger is the logger of a relay or Subscriber given none: the
// application's slog default, so dead letters and outages are seen
// without configuration. watermill.NopLogger{} silences it.
func defaultLogger() watermill.LoggerAdapter { return watermill.NewSlogLogger(slog.Default()) }
