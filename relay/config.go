package relay

import (
	"cmp"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/trace"

	"github.com/entoutbox/entoutbox/internal/backoff"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/metrics"
	"github.com/entoutbox/entoutbox/schema"
)

// Config configures a Relay. The settings several read paths use sit at
// the top, once; each path's own are in Fast, Compatible and WAL. Each
// field says which paths use it, and Validate refuses one given for a path
// that does not.
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
	// ScheduledTable holds the events emitted for a later time
	// (events.DeliverAt, events.DeliverAfter; schema.ScheduledEvent): the
	// relay moves each into the outbox once it is due by the database's
	// clock, and the read path delivers it from there. Every path;
	// schema.ScheduledEventTable when empty; nothing is moved when the
	// table does not exist.
	ScheduledTable string
	// SequenceTable holds the aggregates' counters a promoted event takes
	// its aggregate_seq from, as Emit numbers the others (schema.
	// AggregateSequence). Every path; schema.AggregateSequenceTable when
	// empty; no numbers when the table does not exist.
	SequenceTable string
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
	// in binary content mode (prefixed metadata; see CloudEvents), on every
	// path.
	CloudEvents *CloudEvents
	// Tenant, when set, names the tenant whose database this relay reads
	// (a relay of the fleet package, or one relay per tenant database):
	// every message carries it under events.MetaTenant and, with
	// CloudEvents, as the extension attribute "tenant" (see
	// MetaCloudEventsTenant). Letters, digits, '.', '_' and '-', at most
	// 63 bytes, so that every broker's headers carry it as it is. Every
	// path.
	Tenant string

	// BatchSize is the most rows held at once: on the fast path claimed
	// (in steps of at least a quarter of it) and not yet recorded as
	// delivered, on the wal path read and not yet confirmed (a single
	// larger transaction is read through; it also bounds the duplicates
	// after a crash), on the compatible path read at once. Every path;
	// DefaultBatchSize when zero, DefaultCompatibleBatchSize on the
	// compatible path.
	BatchSize int
	// RetryInterval is how long a failed publish waits before it is tried
	// again: on the fast and wal paths the first wait, doubling up to
	// MaxBackoff; on the compatible path every wait. Every path;
	// DefaultRetryInterval when zero, DefaultCompatibleRetryInterval on
	// the compatible path.
	RetryInterval time.Duration
	// PollInterval is how often an idle relay looks for new rows (on the
	// fast path, when no notification woke it). Fast and compatible paths
	// (the wal path streams); DefaultPollInterval when zero,
	// DefaultCompatiblePollInterval on the compatible path.
	PollInterval time.Duration
	// Concurrency bounds the publishes in flight. Fast and wal paths (the
	// compatible path publishes one at a time); DefaultConcurrency when
	// zero.
	Concurrency int
	// MaxBytesInFlight bounds the payload and header bytes of the rows
	// held (see BatchSize); a row larger than it is held alone. Fast and
	// wal paths; DefaultMaxBytesInFlight when zero.
	MaxBytesInFlight int64
	// MaxAttempts bounds the failed publishes of a row (outages do not
	// count) before it goes to the dead letters. Fast and wal paths (the
	// compatible path's forwarder retries until the publish works);
	// DefaultMaxAttempts when zero.
	MaxAttempts int
	// MaxBackoff bounds the doubling wait of RetryInterval. Fast and wal
	// paths; DefaultMaxBackoff when zero.
	MaxBackoff time.Duration

	// Fast configures PathFast.
	Fast FastConfig
	// Compatible configures PathCompatible.
	Compatible CompatibleConfig
	// WAL configures PathWAL.
	WAL WALConfig
}

var (
	allPaths     = []Path{PathFast, PathWAL, PathCompatible, PathPoll}
	fastWAL      = []Path{PathFast, PathWAL}
	fastWALPoll  = []Path{PathFast, PathWAL, PathPoll}
	pollingPaths = []Path{PathFast, PathCompatible, PathPoll}
)

// pathSettings are the settings of Config that only some read paths use,
// named as Validate names them: one given for another path than the
// relay's is refused rather than ignored.
var pathSettings = []struct {
	name  string
	paths []Path
	given func(c *Config) bool
}{
	{"PollInterval", pollingPaths, func(c *Config) bool { return c.PollInterval != 0 }},
	{"Concurrency", fastWALPoll, func(c *Config) bool { return c.Concurrency != 0 }},
	{"MaxBytesInFlight", fastWAL, func(c *Config) bool { return c.MaxBytesInFlight != 0 }},
	{"MaxAttempts", fastWALPoll, func(c *Config) bool { return c.MaxAttempts != 0 }},
	{"MaxBackoff", fastWALPoll, func(c *Config) bool { return c.MaxBackoff != 0 }},

	{"Fast.RelayID", []Path{PathFast}, func(c *Config) bool { return c.Fast.RelayID != "" }},
	{"Fast.Lease", []Path{PathFast}, func(c *Config) bool { return c.Fast.Lease != 0 }},
	{"Fast.Partitions", []Path{PathFast}, func(c *Config) bool { return c.Fast.Partitions != 0 }},
	{"Fast.PollOnly", []Path{PathFast}, func(c *Config) bool { return c.Fast.PollOnly }},
	{"Fast.ListenDB", []Path{PathFast}, func(c *Config) bool { return c.Fast.ListenDB != nil }},
	{"Fast.Delete", []Path{PathFast}, func(c *Config) bool { return c.Fast.Delete }},
	{"Fast.DeliveredLog", []Path{PathFast}, func(c *Config) bool { return c.Fast.DeliveredLog }},

	{"Compatible.ConsumerGroup", []Path{PathCompatible}, func(c *Config) bool { return c.Compatible.ConsumerGroup != "" }},

	{"WAL.Slot", []Path{PathWAL}, func(c *Config) bool { return c.WAL.Slot != "" }},
	{"WAL.Publication", []Path{PathWAL}, func(c *Config) bool { return c.WAL.Publication != "" }},
	{"WAL.ReplicationURL", []Path{PathWAL}, func(c *Config) bool { return c.WAL.ReplicationURL != "" }},
	{"WAL.StatusInterval", []Path{PathWAL}, func(c *Config) bool { return c.WAL.StatusInterval != 0 }},
	{"WAL.StandbyRetry", []Path{PathWAL}, func(c *Config) bool { return c.WAL.StandbyRetry != 0 }},
	{"WAL.ProgressInterval", []Path{PathWAL}, func(c *Config) bool { return c.WAL.ProgressInterval != 0 }},
}

// pathsText says which paths of all a setting applies to, as Validate's
// refusals do: "the fast path", "the fast and wal paths".
func pathsText(paths []Path) string {
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = string(p)
	}
	if len(names) == 1 {
		return "the " + names[0] + " path"
	}
	return "the " + strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1] + " paths"
}

// WrongPathError is Validate's refusal of a setting the relay's read path
// does not use.
type WrongPathError struct {
	// Setting is the field, under Config: "Fast.Lease", "Concurrency".
	Setting string
	// Paths are the read paths that use it.
	Paths []Path
	// Path is the relay's.
	Path Path
}

func (e *WrongPathError) Error() string {
	only := ""
	if len(e.Paths) < len(allPaths) {
		only = " only"
	}
	return fmt.Sprintf("relay: Config.%s applies to %s%s; this relay runs the %s path", e.Setting, pathsText(e.Paths), only, e.Path)
}

// Validate reports the first setting that cannot work, naming its field,
// or that the chosen read path does not use (a *WrongPathError). New calls
// it before it fills in the defaults.
func (c Config) Validate() error {
	path := c.Path
	if path == "" {
		path = pick(polls(c.DB), PathPoll, PathFast)
	}
	if err := c.checkPath(path); err != nil {
		return err
	}
	for _, s := range pathSettings {
		if s.given(&c) && !slices.Contains(s.paths, path) {
			return &WrongPathError{Setting: s.name, Paths: s.paths, Path: path}
		}
	}
	table := c.Table
	if table == "" {
		table = schema.OutboxTable
	}
	switch {
	case c.DB == nil:
		return errors.New("relay: Config.DB is nil")
	case c.Publisher == nil:
		return errors.New("relay: Config.Publisher is nil")
	case c.CloseTimeout < 0:
		return fmt.Errorf("relay: Config.CloseTimeout must not be negative, not %s", c.CloseTimeout)
	case c.BatchSize < 0:
		return fmt.Errorf("relay: Config.BatchSize must not be negative, not %d", c.BatchSize)
	case c.RetryInterval < 0:
		return fmt.Errorf("relay: Config.RetryInterval must not be negative, not %s", c.RetryInterval)
	case c.PollInterval < 0:
		return fmt.Errorf("relay: Config.PollInterval must not be negative, not %s", c.PollInterval)
	case c.Concurrency < 0:
		return fmt.Errorf("relay: Config.Concurrency must not be negative, not %d", c.Concurrency)
	case c.MaxBytesInFlight < 0:
		return fmt.Errorf("relay: Config.MaxBytesInFlight must not be negative, not %d", c.MaxBytesInFlight)
	case c.MaxAttempts < 0:
		return fmt.Errorf("relay: Config.MaxAttempts must not be negative, not %d", c.MaxAttempts)
	case c.MaxBackoff < 0:
		return fmt.Errorf("relay: Config.MaxBackoff must not be negative, not %s", c.MaxBackoff)
	case c.RetryInterval > 0 && c.MaxBackoff > 0 && c.MaxBackoff < c.RetryInterval:
		return fmt.Errorf("relay: Config.MaxBackoff (%s) must not be below RetryInterval (%s)", c.MaxBackoff, c.RetryInterval)
	}
	if err := checkTableName(table); err != nil {
		return err
	}
	if err := checkIdentifiers("Config.", c.ScheduledTable, c.SequenceTable); err != nil {
		return err
	}
	if err := CheckTenant(c.Tenant); err != nil {
		return fmt.Errorf("relay: Config.Tenant: %w", err)
	}
	if err := c.CloudEvents.validate("Config.CloudEvents."); err != nil {
		return err
	}
	if err := c.Fast.validate("Config.Fast."); err != nil {
		return err
	}
	wal := c.WAL
	if path == PathWAL {
		wal.setNames(table) // the names it will use, the defaults among them
	}
	return wal.validate("Config.WAL.")
}

// checkPath refuses a read path that is none, or that c.DB's database
// cannot run: SQLite runs the poll path alone; MySQL the poll path and
// the compatible path, whose relays all share one position there.
func (c Config) checkPath(path Path) error {
	if path != PathFast && path != PathCompatible && path != PathWAL && path != PathPoll {
		return fmt.Errorf("relay: Config.Path is %q; want %q, %q, %q or %q", c.Path, PathFast, PathCompatible, PathWAL, PathPoll)
	}
	switch d := dialectOf(c.DB); {
	case d == outboxdb.Postgres && path == PathPoll:
		return fmt.Errorf("relay: Config.Path %q is SQLite's and MySQL's; on PostgreSQL use %q, %q or %q", path, PathFast, PathCompatible, PathWAL)
	case d == outboxdb.SQLite && path != PathPoll:
		return fmt.Errorf("relay: Config.Path %q needs PostgreSQL (LISTEN, snapshots of commit order, logical replication); on %s the relay polls: %q, the default there",
			path, d, PathPoll)
	case d == outboxdb.MySQL && path != PathPoll && path != PathCompatible:
		return fmt.Errorf("relay: Config.Path %q needs PostgreSQL (LISTEN, logical replication); on %s use %q, the default there, or %q",
			path, d, PathPoll, PathCompatible)
	case d == outboxdb.MySQL && path == PathCompatible && c.Compatible.ConsumerGroup != "" && c.Compatible.ConsumerGroup != DefaultConsumerGroup:
		return fmt.Errorf("relay: Config.Compatible.ConsumerGroup %q: on MySQL the compatible path's relays read the rows not yet delivered "+
			"(delivered_at), not an offset of their group, so the relays of an outbox form one group; leave it empty", c.Compatible.ConsumerGroup)
	}
	return nil
}

// setDefaults fills in the defaults of the settings the relay's path uses.
func (c *Config) setDefaults() {
	if c.Path == "" {
		c.Path = pick(polls(c.DB), PathPoll, PathFast)
	}
	if c.Table == "" {
		c.Table = schema.OutboxTable
	}
	if c.DeadLetterTable == "" {
		c.DeadLetterTable = schema.DeadLetterTable
	}
	if c.ScheduledTable == "" {
		c.ScheduledTable = schema.ScheduledEventTable
	}
	if c.SequenceTable == "" {
		c.SequenceTable = schema.AggregateSequenceTable
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.Logger == nil {
		c.Logger = defaultLogger()
	}
	compatible := c.Path == PathCompatible
	orDefault(&c.BatchSize, pick(compatible, DefaultCompatibleBatchSize, DefaultBatchSize))
	orDefault(&c.RetryInterval, pick(compatible, DefaultCompatibleRetryInterval, DefaultRetryInterval))
	if c.Path != PathWAL {
		orDefault(&c.PollInterval, pick(compatible, DefaultCompatiblePollInterval, pick(c.Path == PathPoll, DefaultSQLitePollInterval, DefaultPollInterval)))
	}
	if !compatible {
		orDefault(&c.Concurrency, DefaultConcurrency)
		orDefault(&c.MaxBytesInFlight, DefaultMaxBytesInFlight)
		orDefault(&c.MaxAttempts, DefaultMaxAttempts)
		// MaxBackoff stays zero, for DefaultMaxBackoff where it is read: a
		// RetryInterval above that default is capped by it, as it always
		// was, rather than refused as a MaxBackoff below it.
	}
	switch c.Path {
	case PathFast:
		c.Fast.setDefaults()
	case PathCompatible:
		c.Compatible.setDefaults()
	case PathWAL:
		c.WAL.setDefaults(c.Table)
	}
}

// orDefault sets *v to def when it is the zero value.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

func pick[T any](cond bool, yes, no T) T {
	if cond {
		return yes
	}
	return no
}

// backoff is the wait after the given failed attempt (1-based): the fast
// and wal paths' RetryInterval doubling up to MaxBackoff.
func (c Config) backoff(attempt int) time.Duration {
	return backoff.Exponential(c.RetryInterval, cmp.Or(c.MaxBackoff, DefaultMaxBackoff), attempt)
}
