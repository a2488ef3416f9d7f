package relay

// CompatibleConfig configures the compatible read path, the stock
// watermill-sql subscriber and Watermill's forwarder: what only it uses.
// The settings it shares with other paths (BatchSize, PollInterval,
// RetryInterval) are Config's.
type CompatibleConfig struct {
	// ConsumerGroup names the relay's read position; relays sharing a
	// group share the work. DefaultConsumerGroup when empty. On MySQL the
	// position is the rows' delivered_at, one for every relay of the
	// outbox: it is refused there unless empty or DefaultConsumerGroup.
	ConsumerGroup string
}

func (c *CompatibleConfig) setDefaults() {
	orDefault(&c.ConsumerGroup, DefaultConsumerGroup)
}
