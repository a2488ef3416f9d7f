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

	"github.com/entoutbox/entoutbox/internal/pgsql"
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
)

// Config configures a Relay.
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
	// ConsumerGroup names the relay's read position (compatible path);
	// relays sharing a group share the work. "entoutbox_relay" when empty.
	ConsumerGroup string
	// PollInterval is how often an idle relay looks for new rows without
	// a notification; DefaultPollInterval (fast) or
	// DefaultCompatiblePollInterval when zero.
	PollInterval time.Duration
	// RetryInterval is how long a failed publish waits before it is tried
	// again (doubling on the fast path); DefaultRetryInterval (fast) or
	// DefaultCompatibleRetryInterval when zero.
	RetryInterval time.Duration
	// BatchSize is how many rows are held at once (fast) or read at once
	// (compatible); 2000 or 100 when zero.
	BatchSize int
	// MaxBytesInFlight bounds the payload and header bytes held at once
	// (fast path): rows claimed and not yet recorded as delivered. A row
	// larger than it is sent alone. DefaultMaxBytesInFlight (64 MiB) when
	// zero. The compatible path holds a batch of BatchSize rows instead.
	MaxBytesInFlight int64
	// Concurrency bounds the publishes in flight (fast path); 256 when zero.
	Concurrency int
	// Lease is how long a relay owns its partitions unrenewed (fast
	// path): those of a relay that died go to the others after it. 30 s
	// when zero.
	Lease time.Duration
	// Partitions is how many parts the aggregates are hashed into, shared
	// out among the relays of the table (fast path); the same on every
	// relay of a table. 64 when zero.
	Partitions int
	// PollOnly disables what needs a session of its own (fast path), for
	// PgBouncer in transaction mode: LISTEN/NOTIFY, the liveness lock (a
	// relay that dies is then taken over when its lease ends) and the
	// claim's session setting. See SubscriberConfig.PollOnly.
	PollOnly bool
	// DeleteDelivered deletes delivered rows instead of stamping
	// delivered_at (fast path).
	DeleteDelivered bool
	// MaxAttempts bounds the failed publishes of one event before it goes
	// to the dead letters (fast path); 10 when zero. Failures while the
	// broker fails every publish are not counted.
	MaxAttempts int
	// RelayID names this relay in the partition table (fast path); random
	// when empty.
	RelayID string
	// TopicPrefix is prepended to every destination topic, e.g. to keep
	// the environments that share a broker apart ("staging_").
	TopicPrefix string
	// CloseTimeout bounds how long shutdown waits for in-flight publishes;
	// 30 s when zero.
	CloseTimeout time.Duration
	Logger       watermill.LoggerAdapter
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
	if c.ConsumerGroup == "" {
		c.ConsumerGroup = DefaultConsumerGroup
	}
	compatible := c.Path == PathCompatible
	if c.PollInterval == 0 {
		c.PollInterval = pick(compatible, DefaultCompatiblePollInterval, DefaultPollInterval)
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = pick(compatible, DefaultCompatibleRetryInterval, DefaultRetryInterval)
	}
	if c.BatchSize == 0 {
		c.BatchSize = pick(compatible, DefaultCompatibleBatchSize, DefaultBatchSize)
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.Logger == nil {
		c.Logger = watermill.NopLogger{}
	}
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	switch {
	case c.DB == nil:
		return errors.New("relay: DB is nil")
	case c.Publisher == nil:
		return errors.New("relay: Publisher is nil")
	case c.Path != PathFast && c.Path != PathCompatible:
		return fmt.Errorf("relay: unknown path %q (want %q or %q)", c.Path, PathFast, PathCompatible)
	case c.Concurrency < 0:
		return errors.New("relay: Concurrency must not be negative")
	case c.PollInterval < 0 || c.RetryInterval < 0 || c.CloseTimeout < 0:
		return errors.New("relay: intervals must not be negative")
	case c.BatchSize < 0:
		return errors.New("relay: BatchSize must not be negative")
	case c.MaxBytesInFlight < 0:
		return fmt.Errorf("relay: MaxBytesInFlight must not be negative, not %d", c.MaxBytesInFlight)
	case c.Lease != 0 && c.Lease < time.Second:
		return fmt.Errorf("relay: Lease must be at least 1s, not %s", c.Lease)
	case c.Partitions != 0 && (c.Partitions < 1 || c.Partitions > maxPartitions):
		return fmt.Errorf("relay: Partitions must be between 1 and %d, not %d", maxPartitions, c.Partitions)
	}
	return checkTableName(c.Table)
}

// maxTableName is the longest outbox table name: the relay names tables
// of its own after it, the longest <table>_relay_offsets, and PostgreSQL
// cuts identifiers at 63 bytes, which could land one of them on another
// or on the outbox table itself.
const maxTableName = 63 - len("_relay_offsets")

func checkTableName(table string) error {
	if len(table) > maxTableName {
		return fmt.Errorf("relay: table name %q is %d bytes, at most %d: the relay's own tables are named after it "+
			"(%q and others) and PostgreSQL identifiers hold 63 bytes", table, len(table), maxTableName, table+"_relay_offsets")
	}
	return nil
}

// outboxColumns are the columns of the outbox table the relay reads or
// writes.
const outboxColumns = "id,event_id,event_name,event_version,topic,aggregate_type,aggregate_id,payload,headers," +
	"created_at,transaction_id,available_at,attempts,delivered_at,last_error"

// checkTables refuses an outbox table that does not exist or is not one,
// and a dead-letter table that does not exist, before the relay creates
// tables of its own after their names or polls them for ever.
func checkTables(ctx context.Context, db *sql.DB, table, deadLetterTable string) error {
	var exists bool
	var missing string
	if err := db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL, array_to_string(ARRAY(
			SELECT c FROM unnest(string_to_array($2, ',')) c WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a
				WHERE a.attrelid = to_regclass($1) AND a.attname = c AND a.attnum > 0 AND NOT a.attisdropped)), ', ')`,
		pgsql.QuoteIdent(table), outboxColumns).Scan(&exists, &missing); err != nil {
		return fmt.Errorf("relay: looking for table %q: %w", table, err)
	}
	const migrate = "run the ent migration first: client.Schema.Create"
	if !exists {
		return fmt.Errorf("relay: table %q does not exist (%s)", table, migrate)
	}
	if missing != "" {
		return fmt.Errorf("relay: table %q is not an outbox table: it lacks the columns %s (%s)", table, missing, migrate)
	}
	if err := db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, pgsql.QuoteIdent(deadLetterTable)).Scan(&exists); err != nil {
		return fmt.Errorf("relay: looking for table %q: %w", deadLetterTable, err)
	}
	if !exists {
		return fmt.Errorf("relay: dead-letter table %q does not exist (%s)", deadLetterTable, migrate)
	}
	return nil
}

// Relay moves committed outbox rows to a Watermill publisher, at least once.
// A row counts as delivered (delivered_at is set) only after the publisher
// returned without error, which for the broker publishers means the broker
// acknowledged it.
type Relay struct {
	cfg Config
	// fast is the fast path's Subscriber while it runs.
	fast atomic.Pointer[Subscriber]
}

// New checks cfg and returns a relay; Run starts it.
func New(cfg Config) (*Relay, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Relay{cfg: cfg}, nil
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
	if r.cfg.Path == PathCompatible {
		err = r.runCompatible(ctx)
	} else {
		err = r.runFast(ctx)
	}
	if err != nil && ctx.Err() != nil {
		return nil // stopped while starting
	}
	return err
}

// pick is a when compatible, else b.
func pick[T any](compatible bool, a, b T) T {
	if compatible {
		return a
	}
	return b
}
