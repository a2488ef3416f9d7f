package outboxdb

import (
	"fmt"

	"github.com/entoutbox/entoutbox/schema"
)

// Tables names the tables of one outbox: the outbox table, the tables the
// relay names after it (the methods), the dead-letter table, the
// scheduled events' table, and the consumers' tables.
type Tables struct {
	Outbox      string
	DeadLetters string
	// Scheduled holds the events emitted for a later time until they are
	// due (schema.ScheduledEvent); it may not exist.
	Scheduled string
	// The consumers' tables: processed events (dedupe), positions and
	// the aggregates' counters.
	Processed, Positions, Sequences string
	// Dialect is the database the tables live in: PostgreSQL when zero.
	Dialect Dialect
}

// New names the tables of the outbox table outbox and the dead-letter
// table deadLetters; the schema package's defaults for those empty and
// for the scheduled events' and the consumers' tables.
func New(outbox, deadLetters string) Tables {
	if outbox == "" {
		outbox = schema.OutboxTable
	}
	if deadLetters == "" {
		deadLetters = schema.DeadLetterTable
	}
	return Tables{Outbox: outbox, DeadLetters: deadLetters, Scheduled: schema.ScheduledEventTable, Processed: schema.ProcessedEventTable,
		Positions: schema.ConsumerPositionTable, Sequences: schema.AggregateSequenceTable}
}

// The suffixes of the tables the relay names after the outbox table.
const (
	partitionsSuffix   = "_partitions"
	relaysSuffix       = "_relays"
	walProgressSuffix  = "_wal_progress"
	relayOffsetsSuffix = "_relay_offsets"
)

// Partitions holds the fast relays' leases, one row per topic and
// partition.
func (t Tables) Partitions() string { return t.Outbox + partitionsSuffix }

// Relays holds the fast relays' subscriptions alive, one row per topic and
// relay.
func (t Tables) Relays() string { return t.Outbox + relaysSuffix }

// WALProgress holds the WAL relays' snapshots of delivered transactions,
// one row per slot.
func (t Tables) WALProgress() string { return t.Outbox + walProgressSuffix }

// RelayOffsets holds the compatible path's offsets (watermill-sql's
// PostgreSQL offsets adapter), one row per consumer group.
func (t Tables) RelayOffsets() string { return t.Outbox + relayOffsetsSuffix }

// MaxOutboxName is the longest outbox table name: PostgreSQL cuts
// identifiers at 63 bytes, which could land the longest derived name on
// another table, or on the outbox table itself.
const MaxOutboxName = 63 - len(relayOffsetsSuffix)

// CheckName refuses an outbox table name too long for the names derived
// from it.
func CheckName(outbox string) error {
	if len(outbox) > MaxOutboxName {
		return fmt.Errorf("table name %q is %d bytes, at most %d: the relay's own tables are named after it "+
			"(%q and others) and PostgreSQL identifiers hold 63 bytes", outbox, len(outbox), MaxOutboxName,
			outbox+relayOffsetsSuffix)
	}
	return nil
}

// Quote quotes the table (or column) name for t's database: backticks
// on MySQL, double quotes elsewhere.
func (t Tables) Quote(name string) string { return t.Dialect.quote(name) }
