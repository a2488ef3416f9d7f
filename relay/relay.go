package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/trace"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/tracing"
	"github.com/entoutbox/entoutbox/metrics"
	"github.com/entoutbox/entoutbox/schema"
)

// Path is how the relay reads committed rows.
type Path string

const (
	// PathFast, the default, reads with this package's Subscriber: batch
	// claims of the partitions a relay owns, many publishes in flight with
	// at most one per aggregate, LISTEN/NOTIFY wake-ups, batched acks,
	// several replicas sharing the partitions.
	PathFast Path = "fast"
	// PathCompatible reads with the stock watermill-sql subscriber and
	// feeds Watermill's forwarder component unchanged. One message at a
	// time, strictly in commit order; it waits for every older transaction
	// on the server to end (snapshot xmin) before it reads a row.
	PathCompatible Path = "compatible"
	// PathWAL reads committed inserts from PostgreSQL logical replication
	// (a pgoutput slot and a publication of the table), in commit order,
	// at most one publish per aggregate in flight. No polling, no claims,
	// no write per delivered row: the slot's confirmed position is the
	// delivery state. One relay streams a slot; others wait as standbys.
	PathWAL Path = "wal"
)

// Config configures a Relay. What both read paths share is at the top;
// each path's own settings are in Fast, Compatible and WAL, and only the
// chosen path's are used.
type Config struct {
	// DB holds the outbox table (database/sql with the pgx driver).
	DB *sql.DB
	// Publisher receives every event on its destination topic.
	Publisher message.Publisher
	// Path selects the read path; PathFast when empty.
	Path Path
	// Table and DeadLetterTable name the tables; the schema package's
	// defaults when empty.
	Table           string
	DeadLetterTable string
	// TopicPrefix is prepended to every destination topic, e.g. to keep
	// the environments that share a broker apart ("staging_").
	TopicPrefix string
	// CloseTimeout bounds how long shutdown waits for in-flight publishes;
	// DefaultCloseTimeout when zero.
	CloseTimeout time.Duration
	// Logger receives what the relay logs, each dead letter at error level
	// among it; slog.Default() (through watermill.NewSlogLogger) when nil.
	// watermill.NopLogger{} silences it.
	Logger watermill.LoggerAdapter

	// Metrics, when set, receives the relay's metrics (see the metrics
	// package); nil turns them off.
	Metrics *metrics.Metrics
	// TracerProvider starts a producer span "send <topic>" per publish, a
	// child of the span the event was emitted in, whose context goes out
	// in the message's metadata for the consumer's span (propagated with
	// otel.GetTextMapPropagator()). The global provider when nil, which
	// traces nothing until the application sets one.
	TracerProvider trace.TracerProvider
	// MessagingSystem is the messaging.system attribute of the spans, the
	// broker's name (broker.MessagingSystem of a broker.Broker's Scheme);
	// "watermill" when empty.
	MessagingSystem string
	// CloudEvents, when set, makes every message a CloudEvents 1.0 event
	// in binary content mode (ce_ metadata; see CloudEvents), on either
	// path.
	CloudEvents *CloudEvents

	// Fast configures PathFast.
	Fast FastConfig
	// Compatible configures PathCompatible.
	Compatible CompatibleConfig
	// WAL configures PathWAL.
	WAL WALConfig
}

// FastConfig configures the fast read path.
type FastConfig struct {
	// Concurrency bounds the publishes in flight; DefaultConcurrency when
	// zero.
	Concurrency int
	// Subscriber configures the reads: batch size, byte bound, lease,
	// partitions, polling, retries, MaxAttempts, RelayID. Its Table,
	// DeadLetterTable and Logger are the relay's: leave them empty.
	Subscriber SubscriberConfig
}

// CompatibleConfig configures the compatible read path, the stock
// watermill-sql subscriber and Watermill's forwarder.
type CompatibleConfig struct {
	// ConsumerGroup names the relay's read position; relays sharing a
	// group share the work. DefaultConsumerGroup when empty.
	ConsumerGroup string
	// PollInterval is how often it looks for new rows;
	// DefaultCompatiblePollInterval when zero.
	PollInterval time.Duration
	// RetryInterval is how long a failed publish waits before it is tried
	// again; DefaultCompatibleRetryInterval when zero.
	RetryInterval time.Duration
	// BatchSize is how many rows it reads at once;
	// DefaultCompatibleBatchSize when zero.
	BatchSize int
}

func (c *Config) setDefaults() {
	if c.Path == "" {
		c.Path = PathFast
	}
	if c.Table == "" {
		c.Table = schema.OutboxTable
	}
	if c.DeadLetterTable == "" {
		c.DeadLetterTable = schema.DeadLetterTable
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.Logger == nil {
		c.Logger = defaultLogger()
	}
	if c.Fast.Concurrency == 0 {
		c.Fast.Concurrency = DefaultConcurrency
	}
	c.Compatible.setDefaults()
	if c.Path == PathWAL {
		c.WAL.setDefaults(c.Table)
	}
}

func (c *CompatibleConfig) setDefaults() {
	if c.ConsumerGroup == "" {
		c.ConsumerGroup = DefaultConsumerGroup
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultCompatiblePollInterval
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = DefaultCompatibleRetryInterval
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultCompatibleBatchSize
	}
}

// subscriberConfig is the fast Subscriber's configuration: Fast.Subscriber
// with the relay's tables and logger.
func (c Config) subscriberConfig() SubscriberConfig {
	sc := c.Fast.Subscriber
	sc.Table, sc.DeadLetterTable, sc.Logger = c.Table, c.DeadLetterTable, c.Logger
	sc.CloudEvents = c.CloudEvents
	return sc
}

// Validate reports the first setting that cannot work, naming its field.
// New calls it after filling in the defaults.
func (c Config) Validate() error {
	switch {
	case c.DB == nil:
		return errors.New("relay: Config.DB is nil")
	case c.Publisher == nil:
		return errors.New("relay: Config.Publisher is nil")
	case c.Path != "" && c.Path != PathFast && c.Path != PathCompatible && c.Path != PathWAL:
		return fmt.Errorf("relay: Config.Path is %q; want %q, %q or %q", c.Path, PathFast, PathCompatible, PathWAL)
	case c.CloseTimeout < 0:
		return fmt.Errorf("relay: Config.CloseTimeout must not be negative, not %s", c.CloseTimeout)
	case c.Fast.Concurrency < 0:
		return fmt.Errorf("relay: Config.Fast.Concurrency must not be negative, not %d", c.Fast.Concurrency)
	case c.Fast.Subscriber.Table != "" && c.Fast.Subscriber.Table != c.Table:
		return fmt.Errorf("relay: Config.Fast.Subscriber.Table is %q, but the relay's table is Config.Table (%q): leave it empty",
			c.Fast.Subscriber.Table, c.Table)
	case c.Fast.Subscriber.DeadLetterTable != "" && c.Fast.Subscriber.DeadLetterTable != c.DeadLetterTable:
		return fmt.Errorf("relay: Config.Fast.Subscriber.DeadLetterTable is %q, but the relay's is Config.DeadLetterTable (%q): "+
			"leave it empty", c.Fast.Subscriber.DeadLetterTable, c.DeadLetterTable)
	case c.Compatible.PollInterval < 0:
		return fmt.Errorf("relay: Config.Compatible.PollInterval must not be negative, not %s", c.Compatible.PollInterval)
	case c.Compatible.RetryInterval < 0:
		return fmt.Errorf("relay: Config.Compatible.RetryInterval must not be negative, not %s", c.Compatible.RetryInterval)
	case c.Compatible.BatchSize < 0:
		return fmt.Errorf("relay: Config.Compatible.BatchSize must not be negative, not %d", c.Compatible.BatchSize)
	}
	if err := checkTableName(c.Table); err != nil {
		return err
	}
	if err := c.CloudEvents.validate("Config.CloudEvents."); err != nil {
		return err
	}
	if err := c.WAL.validate("Config.WAL."); err != nil {
		return err
	}
	return c.subscriberConfig().validate("Config.Fast.Subscriber.")
}

func checkTableName(table string) error {
	if err := outboxdb.CheckName(table); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	return nil
}

// checkTables refuses an outbox table that does not exist or is not one,
// and a dead-letter table that does not exist or lacks a column the relay
// writes.
func checkTables(ctx context.Context, db *sql.DB, table, deadLetterTable string) error {
	if err := outboxdb.New(table, deadLetterTable).Check(ctx, db); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	return nil
}

// Relay moves committed outbox rows to a Watermill publisher, at least once.
// A row counts as delivered (delivered_at is set; on the WAL path, the
// slot's confirmed position moves past it) only after the publisher
// returned without error, which for the broker publishers means the broker
// acknowledged it.
type Relay struct {
	cfg    Config
	tracer *tracing.Tracer
	// fast is the fast path's Subscriber while it runs.
	fast atomic.Pointer[Subscriber]
	// wal is the WAL path's status while it runs.
	wal atomic.Pointer[walState]
	// hooks go to its fast Subscriber; zero outside this package's tests.
	hooks testHooks
}

// New checks cfg and returns a relay; Run starts it.
func New(cfg Config) (*Relay, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Relay{cfg: cfg, tracer: tracing.New(cfg.TracerProvider)}, nil
}

// Run relays until ctx is done, then stops gracefully: in-flight publishes
// finish (up to CloseTimeout), their rows are marked delivered, and the
// database connections it held are released. It returns nil after a
// shutdown asked for by ctx.
func (r *Relay) Run(ctx context.Context) error {
	if err := r.cfg.DB.PingContext(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return fmt.Errorf("relay: database is not reachable: %w", err)
	}
	if err := checkTables(ctx, r.cfg.DB, r.cfg.Table, r.cfg.DeadLetterTable); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	var err error
	switch r.cfg.Path {
	case PathCompatible:
		err = r.runCompatible(ctx)
	case PathWAL:
		err = r.runWAL(ctx)
	default:
		err = r.runFast(ctx)
	}
	if err != nil && ctx.Err() != nil {
		return nil // stopped while starting
	}
	return err
}
