package relay

import (
	"fmt"
	"regexp"
	"time"
)

// WALConfig configures the WAL read path: committed inserts read from
// PostgreSQL logical replication (pgoutput), in commit order. The delivery
// state is the replication slot's confirmed position; no row is written
// per delivered event. It holds what only this path uses; the settings it
// shares with other paths (BatchSize, Concurrency, MaxBytesInFlight,
// MaxAttempts, RetryInterval, MaxBackoff) are Config's.
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

// setNames fills in the default slot and publication names of table.
func (c *WALConfig) setNames(table string) {
	orDefault(&c.Slot, defaultWALName(table))
	orDefault(&c.Publication, defaultWALName(table))
}

func (c *WALConfig) setDefaults(table string) {
	c.setNames(table)
	orDefault(&c.StatusInterval, DefaultWALStatusInterval)
	orDefault(&c.StandbyRetry, DefaultWALStandbyRetry)
	orDefault(&c.ProgressInterval, DefaultWALProgressInterval)
}

// validate reports the first setting that cannot work, naming its field
// under prefix.
func (c WALConfig) validate(prefix string) error {
	switch {
	case c.Slot != "" && !slotName.MatchString(c.Slot):
		return fmt.Errorf("relay: %sSlot is %q: a replication slot name is 1 to 63 lower-case letters, digits "+
			"and underscores (the default is the table's name with _wal)", prefix, c.Slot)
	case c.Publication != "" && !slotName.MatchString(c.Publication):
		return fmt.Errorf("relay: %sPublication is %q: want 1 to 63 lower-case letters, digits and underscores",
			prefix, c.Publication)
	case c.StatusInterval < 0:
		return fmt.Errorf("relay: %sStatusInterval must not be negative, not %s", prefix, c.StatusInterval)
	case c.StandbyRetry < 0:
		return fmt.Errorf("relay: %sStandbyRetry must not be negative, not %s", prefix, c.StandbyRetry)
	}
	return nil
}
