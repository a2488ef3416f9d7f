package relay

import (
	"database/sql"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/internal/backoff"
	"github.com/entoutbox/entoutbox/schema"
)

// AllTopics subscribes a Subscriber to the rows of every destination topic;
// each message then carries its topic under MetaTopic.
const AllTopics = "*"

// MetaTopic is the destination topic of a message read with AllTopics.
const MetaTopic = "outbox_topic"

// FastConfig configures the fast read path: what only it uses. The
// settings it shares with other paths (BatchSize, Concurrency,
// MaxBytesInFlight, MaxAttempts, RetryInterval, MaxBackoff, PollInterval)
// are Config's.
type FastConfig struct {
	// RelayID names this relay in the partition table; random when empty.
	// A relay restarted under the same name is back at work at once.
	RelayID string
	// Lease is how long a relay owns its partitions without renewing
	// them: the partitions of a relay that is paused or cut off go to the
	// others after it (one that dies, within seconds through its liveness
	// lock, unless PollOnly). DefaultLease when zero; at least 1s.
	Lease time.Duration
	// Partitions is how many parts the aggregates are hashed into; the
	// relays of a table share them out, so it bounds how many can work at
	// once. Every relay of a table must use the same number;
	// DefaultPartitions when zero, at most 4096.
	Partitions int
	// PollOnly disables what needs a session of its own, for PgBouncer in
	// transaction mode: LISTEN/NOTIFY unless ListenDB is set (it polls
	// instead), the liveness lock (a relay that dies is taken over when its
	// lease ends) and the claim's session setting.
	PollOnly bool
	// ListenDB, when set, is a direct connection to the outbox's database
	// to LISTEN on, when Config.DB goes through a pooler in transaction
	// mode (see SubscriberConfig.ListenDB).
	ListenDB *sql.DB
	// Delete removes delivered rows instead of marking them delivered_at
	// (kept for a retention window; see CleanupDelivered).
	Delete bool
	// DeliveredLog records what was delivered without rewriting the rows:
	// their ids go to a narrow log table, under a floor that moves every
	// half second (docs/delivered-log.md). The rows stay as they were
	// written, kept for replay until retention deletes them. Once a relay
	// kept a log on a table, every fast relay of the table keeps it.
	DeliveredLog bool
}

func (c *FastConfig) setDefaults() {
	orDefault(&c.Lease, DefaultLease)
	orDefault(&c.Partitions, DefaultPartitions)
	// RelayID: the Subscriber picks a random one.
}

// validate reports the first setting that cannot work, naming its field
// after prefix.
func (c FastConfig) validate(prefix string) error {
	switch {
	case c.Lease != 0 && c.Lease < time.Second:
		return fmt.Errorf("relay: %sLease must be at least 1s, not %s", prefix, c.Lease)
	case c.Partitions != 0 && (c.Partitions < 1 || c.Partitions > maxPartitions):
		return fmt.Errorf("relay: %sPartitions must be between 1 and %d, not %d", prefix, maxPartitions, c.Partitions)
	case c.Delete && c.DeliveredLog:
		return fmt.Errorf("relay: %sDelete and %sDeliveredLog exclude each other: a row is either deleted or logged once delivered", prefix, prefix)
	}
	return nil
}

// subscriberConfig is the fast Subscriber's configuration in a relay: the
// relay's settings.
func (c Config) subscriberConfig() SubscriberConfig {
	return SubscriberConfig{
		Table: c.Table, DeadLetterTable: c.DeadLetterTable, Logger: c.Logger, CloudEvents: c.CloudEvents, Tenant: c.Tenant,
		RelayID: c.Fast.RelayID, Lease: c.Fast.Lease, Partitions: c.Fast.Partitions,
		PollOnly: c.Fast.PollOnly, ListenDB: c.Fast.ListenDB, Delete: c.Fast.Delete, DeliveredLog: c.Fast.DeliveredLog,
		BatchSize: c.BatchSize, MaxBytesInFlight: c.MaxBytesInFlight, PollInterval: c.PollInterval,
		MaxAttempts: c.MaxAttempts, InitialBackoff: c.RetryInterval, MaxBackoff: c.MaxBackoff,
	}
}

// SubscriberConfig configures the fast Subscriber.
type SubscriberConfig struct {
	// Table and DeadLetterTable name the tables; the schema package's
	// defaults when empty.
	Table           string
	DeadLetterTable string
	// ScheduledTable and SequenceTable name the tables of the events
	// emitted for a later time and of the aggregates' counters: the
	// Subscriber moves each scheduled event into the outbox once it is
	// due by the database's clock, numbered from its aggregate's counter,
	// as the relay does (Config.ScheduledTable). Several Subscribers of a
	// table do it one at a time. The schema package's defaults when empty;
	// nothing is moved when the scheduled table does not exist, no number
	// taken when the sequence table does not.
	ScheduledTable, SequenceTable string
	// RelayID names this instance in the partition table; random when
	// empty.
	RelayID string
	// BatchSize is the most rows held in memory, claimed in steps of at
	// least a quarter of it; 2000 when zero.
	BatchSize int
	// MaxBytesInFlight bounds the payload and header bytes of the rows
	// held: claimed and not yet recorded as delivered (queued, being
	// published, acked and not recorded). A claim fetches no more than the
	// room left. A row larger than the bound is claimed once nothing else
	// is held, and goes alone. DefaultMaxBytesInFlight when zero.
	MaxBytesInFlight int64
	// Lease is how long a relay owns its partitions without renewing
	// them: the partitions of a relay that died go to the others after
	// it. 30 s when zero.
	Lease time.Duration
	// Partitions is how many parts the aggregates are hashed into; the
	// relays of a table share them out, so it bounds how many can work at
	// once. Every relay of a table must use the same number; 64 when zero,
	// at most 4096.
	Partitions int
	// PollInterval is how often an idle subscriber looks for rows when no
	// notification woke it; 500 ms when zero.
	PollInterval time.Duration
	// PollOnly disables what needs a session of its own, for PgBouncer in
	// transaction mode: LISTEN/NOTIFY unless ListenDB is set (it polls
	// instead), the liveness lock (a relay that dies is taken over when its
	// lease ends) and the claim's session setting.
	PollOnly bool
	// ListenDB, when set, is where the Subscriber LISTENs for the
	// notifications Emit sends at commit: a direct connection to the
	// outbox's database (the same server and database), for when the DB
	// given to NewSubscriber goes through a pooler in transaction mode,
	// where LISTEN does not work. Claims and every write still go through
	// that DB. With PollOnly the liveness lock stays off: a relay that dies
	// is taken over when its lease ends. At start the Subscriber checks that
	// a notification sent through the DB arrives on the listening
	// connection, and logs an error saying what to do when it does not
	// (polling then finds the rows). (Through a PgBouncer before 1.21, DB
	// needs default_query_exec_mode=simple_protocol in its URL: pgx caches
	// prepared statements, which transaction pooling loses.)
	ListenDB *sql.DB
	// Delete removes delivered rows instead of marking them delivered_at
	// (kept for a retention window; see CleanupDelivered).
	Delete bool
	// DeliveredLog records deliveries in the delivered log (see
	// FastConfig.DeliveredLog).
	DeliveredLog bool
	// MaxAttempts bounds the failed deliveries of a row before it goes to
	// the dead letters; 10 when zero.
	MaxAttempts int
	// InitialBackoff and MaxBackoff space the retries of a failed row:
	// 100 ms doubling up to 30 s when zero.
	InitialBackoff, MaxBackoff time.Duration
	// CloseTimeout bounds how long Close waits for the messages handed out
	// to be acked or nacked; those not settled by then come again.
	// DefaultSubscriberCloseTimeout when zero. (The relay waits up to its own CloseTimeout for its publishes
	// before it closes the Subscriber.)
	CloseTimeout time.Duration
	// Logger receives what the relay logs, each dead letter at error level
	// among it; slog.Default() (through watermill.NewSlogLogger) when nil.
	// watermill.NopLogger{} silences it.
	Logger watermill.LoggerAdapter
	// CloudEvents, when set, adds CloudEvents attributes to every message
	// (see CloudEvents); in a relay it is Config.CloudEvents.
	CloudEvents *CloudEvents
	// Tenant, when set, is put on every message (see Config.Tenant); in
	// a relay it is Config.Tenant.
	Tenant string
}

func (c *SubscriberConfig) setDefaults() {
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
	if c.RelayID == "" {
		c.RelayID = "relay-" + uuid.NewString()[:8]
	}
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.MaxBytesInFlight == 0 {
		c.MaxBytesInFlight = DefaultMaxBytesInFlight
	}
	if c.Lease <= 0 {
		c.Lease = DefaultLease
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.InitialBackoff <= 0 {
		c.InitialBackoff = DefaultRetryInterval
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.CloseTimeout <= 0 {
		c.CloseTimeout = DefaultSubscriberCloseTimeout
	}
	if c.Logger == nil {
		c.Logger = defaultLogger()
	}
}

// listenDB is the database to LISTEN on, nil for none: ListenDB when set,
// else db unless PollOnly.
func (c SubscriberConfig) listenDB(db *sql.DB) *sql.DB {
	switch {
	case c.ListenDB != nil:
		return c.ListenDB
	case c.PollOnly:
		return nil
	}
	return db
}

// DefaultMaxBytesInFlight is the default of MaxBytesInFlight: some 64
// thousand events of 1 KB, far beyond BatchSize, so that it only bites on
// large payloads.
const DefaultMaxBytesInFlight = 64 << 20

// maxPartitions bounds SubscriberConfig.Partitions.
const maxPartitions = 4096

// validate reports the first setting that cannot work, naming its field
// after prefix ("SubscriberConfig.").
// It runs on a config with its defaults set: zero means the default.
func (c SubscriberConfig) validate(prefix string) error {
	switch {
	case c.BatchSize < 0:
		return fmt.Errorf("relay: %sBatchSize must not be negative, not %d", prefix, c.BatchSize)
	case c.MaxBytesInFlight < 0:
		return fmt.Errorf("relay: %sMaxBytesInFlight must not be negative, not %d", prefix, c.MaxBytesInFlight)
	case c.Lease != 0 && c.Lease < time.Second:
		return fmt.Errorf("relay: %sLease must be at least 1s, not %s", prefix, c.Lease)
	// Each partition is a row the relays renew every second.
	case c.Partitions != 0 && (c.Partitions < 1 || c.Partitions > maxPartitions):
		return fmt.Errorf("relay: %sPartitions must be between 1 and %d, not %d", prefix, maxPartitions, c.Partitions)
	case c.PollInterval < 0:
		return fmt.Errorf("relay: %sPollInterval must not be negative, not %s", prefix, c.PollInterval)
	case c.MaxAttempts < 0:
		return fmt.Errorf("relay: %sMaxAttempts must not be negative, not %d", prefix, c.MaxAttempts)
	case c.InitialBackoff < 0 || c.MaxBackoff < 0:
		return fmt.Errorf("relay: %sInitialBackoff and MaxBackoff must not be negative, not %s and %s", prefix,
			c.InitialBackoff, c.MaxBackoff)
	case c.InitialBackoff > 0 && c.MaxBackoff > 0 && c.MaxBackoff < c.InitialBackoff:
		return fmt.Errorf("relay: %sMaxBackoff (%s) must not be below InitialBackoff (%s)", prefix, c.MaxBackoff, c.InitialBackoff)
	case c.CloseTimeout < 0:
		return fmt.Errorf("relay: %sCloseTimeout must not be negative, not %s", prefix, c.CloseTimeout)
	}
	if err := checkIdentifiers(prefix, c.ScheduledTable, c.SequenceTable); err != nil {
		return err
	}
	if err := CheckTenant(c.Tenant); err != nil {
		return fmt.Errorf("relay: %sTenant: %w", prefix, err)
	}
	return checkTableName(c.Table)
}

// backoff is the wait after the given failed attempt (1-based).
func (c SubscriberConfig) backoff(attempt int) time.Duration {
	return backoff.Exponential(c.InitialBackoff, c.MaxBackoff, attempt)
}
