package relay

import (
	"fmt"
	"time"
)

// CompatibleConfig configures the compatible read path, the stock
// watermill-sql subscriber and Watermill's forwarder: what only it uses.
// The settings it shares with other paths (BatchSize, PollInterval,
// RetryInterval) are Config's.
type CompatibleConfig struct {
	// ConsumerGroup names the relay's read position; relays sharing a
	// group share the work. DefaultConsumerGroup when empty.
	ConsumerGroup string

	// PollInterval is how often it looks for new rows.
	//
	// Deprecated: use Config.PollInterval; this one is used, on the
	// compatible path, when that is zero.
	PollInterval time.Duration
	// RetryInterval is how long a failed publish waits before it is tried
	// again.
	//
	// Deprecated: use Config.RetryInterval; this one is used, on the
	// compatible path, when that is zero.
	RetryInterval time.Duration
	// BatchSize is how many rows it reads at once.
	//
	// Deprecated: use Config.BatchSize; this one is used, on the
	// compatible path, when that is zero.
	BatchSize int
}

func (c *CompatibleConfig) setDefaults() {
	orDefault(&c.ConsumerGroup, DefaultConsumerGroup)
}

// validate reports the first setting that cannot work, naming its field
// after prefix.
func (c CompatibleConfig) validate(prefix string) error {
	switch {
	case c.PollInterval < 0:
		return fmt.Errorf("relay: %sPollInterval must not be negative, not %s", prefix, c.PollInterval)
	case c.RetryInterval < 0:
		return fmt.Errorf("relay: %sRetryInterval must not be negative, not %s", prefix, c.RetryInterval)
	case c.BatchSize < 0:
		return fmt.Errorf("relay: %sBatchSize must not be negative, not %d", prefix, c.BatchSize)
	}
	return nil
}
