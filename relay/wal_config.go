package relay

import (
	"fmt"
	"regexp"
	"time"

	"github.com/entoutbox/entoutbox/internal/backoff"
)

// WALConfig configures the WAL read path: committed inserts read from
// PostgreSQL logical replication (pgoutput), in commit order. The delivery
// state is the replication slot's confirmed position; no row is written
// per delivered event.
type WALConfig struct {
	// Slot names the logical replication slot, created when absent;
	// "<table>_wal" when empty. Lower-case letters, digits and underscores,
	// at most 63 bytes, as PostgreSQL wants slot names.
	Slot string
	// Publication names the publication of the outbox table's inserts,
	// created when absent; "<table>_wal" when empty.
	Publication string
	// ReplicationURL is the PostgreSQL URL the replication connection
	// opens (replication=database is added); when empty, DB's own
	// connection settings. Set it when DB goes through a pooler, which
	// cannot carry replication.
	ReplicationURL string
	// Concurrency bounds the publishes in flight; DefaultConcurrency when
	// zero.
	Concurrency int
	// MaxRowsInFlight bounds the rows of transactions read and not yet
	// confirmed: when reached, the relay stops reading the stream until
	// the broker acked the oldest. It also bounds the duplicates after a
	// crash (a single larger transaction is read through).
	// DefaultBatchSize when zero.
	MaxRowsInFlight int
	// MaxBytesInFlight bounds the payload and header bytes held of rows
	// not yet acked; a larger row is held alone. DefaultMaxBytesInFlight
	// when zero.
	MaxBytesInFlight int64
	// MaxAttempts bounds the failed publishes of a row (outages do not
	// count) before it goes to the dead letters; DefaultMaxAttempts when
	// zero.
	MaxAttempts int
	// InitialBackoff is the wait before a failed publish is tried again,
	// doubling up to MaxBackoff; DefaultRetryInterval and
	// DefaultMaxBackoff when zero.
	InitialBackoff, MaxBackoff time.Duration
	// StatusInterval is how often the confirmed position is sent to the
	// server; DefaultWALStatusInterval when zero.
	StatusInterval time.Duration
	// StandbyRetry is how often a relay whose slot another relay streams
	// tries to take it; DefaultWALStandbyRetry when zero.
	StandbyRetry time.Duration
	// ProgressInterval is how often the relay records which transactions
	// it delivered (a snapshot, for CleanupDelivered and status);
	// DefaultWALProgressInterval when zero, never when negative.
	ProgressInterval time.Duration
}

// Defaults of WALConfig.
const (
	DefaultWALStatusInterval   = time.Second
	DefaultWALStandbyRetry     = time.Second
	DefaultWALProgressInterval = 5 * time.Second
)

// slotName is what PostgreSQL takes as a replication slot name.
var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// defaultWALName is the default slot and publication name of table.
func defaultWALName(table string) string { return table + "_wal" }

func (c *WALConfig) setDefaults(table string) {
	if c.Slot == "" {
		c.Slot = defaultWALName(table)
	}
	if c.Publication == "" {
		c.Publication = defaultWALName(table)
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.MaxRowsInFlight == 0 {
		c.MaxRowsInFlight = DefaultBatchSize
	}
	if c.MaxBytesInFlight == 0 {
		c.MaxBytesInFlight = DefaultMaxBytesInFlight
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.InitialBackoff == 0 {
		c.InitialBackoff = DefaultRetryInterval
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = DefaultWALStatusInterval
	}
	if c.StandbyRetry == 0 {
		c.StandbyRetry = DefaultWALStandbyRetry
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = DefaultWALProgressInterval
	}
}

// validate reports the first setting that cannot work, naming its field
// under prefix. Slot and Publication are checked once the defaults are in.
func (c WALConfig) validate(prefix string) error {
	switch {
	case c.Slot != "" && !slotName.MatchString(c.Slot):
		return fmt.Errorf("relay: %sSlot is %q: a replication slot name is 1 to 63 lower-case letters, digits "+
			"and underscores (the default is the table's name with _wal)", prefix, c.Slot)
	case c.Publication != "" && !slotName.MatchString(c.Publication):
		return fmt.Errorf("relay: %sPublication is %q: want 1 to 63 lower-case letters, digits and underscores",
			prefix, c.Publication)
	case c.Concurrency < 0:
		return fmt.Errorf("relay: %sConcurrency must not be negative, not %d", prefix, c.Concurrency)
	case c.MaxRowsInFlight < 0:
		return fmt.Errorf("relay: %sMaxRowsInFlight must not be negative, not %d", prefix, c.MaxRowsInFlight)
	case c.MaxBytesInFlight < 0:
		return fmt.Errorf("relay: %sMaxBytesInFlight must not be negative, not %d", prefix, c.MaxBytesInFlight)
	case c.MaxAttempts < 0:
		return fmt.Errorf("relay: %sMaxAttempts must not be negative, not %d", prefix, c.MaxAttempts)
	case c.InitialBackoff < 0:
		return fmt.Errorf("relay: %sInitialBackoff must not be negative, not %s", prefix, c.InitialBackoff)
	case c.MaxBackoff < 0:
		return fmt.Errorf("relay: %sMaxBackoff must not be negative, not %s", prefix, c.MaxBackoff)
	case c.StatusInterval < 0:
		return fmt.Errorf("relay: %sStatusInterval must not be negative, not %s", prefix, c.StatusInterval)
	case c.StandbyRetry < 0:
		return fmt.Errorf("relay: %sStandbyRetry must not be negative, not %s", prefix, c.StandbyRetry)
	}
	return nil
}

// backoff is the wait after the given failed attempt (1-based).
func (c WALConfig) backoff(attempt int) time.Duration {
	return backoff.Exponential(c.InitialBackoff, c.MaxBackoff, attempt)
}
