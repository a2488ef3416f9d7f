package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// Backlog is what the relay still has to do.
type Backlog struct {
	// Pending counts committed events not yet delivered, up to a bound
	// (see ReadBacklog): at it, PendingCapped is set, and there are at
	// least Pending.
	Pending       int64
	PendingCapped bool
	// OldestPending is when the oldest pending event was written; zero
	// when nothing is pending.
	OldestPending time.Time
	// DeadLetters counts events set aside and not yet retried or
	// discarded by an operator (up to a bound, see ReadBacklog).
	DeadLetters int64
	// Relays is the fast relays holding partitions, by name, lapsed leases
	// included; none before a fast relay first ran. On MySQL, the poll
	// relays sharing the outbox.
	Relays []RelayShare
	// Partitions is how many partitions the table is split into; zero
	// before a fast relay first ran.
	Partitions int
	// WAL is the replication slots WAL relays of the table stream; none
	// before a WAL relay first ran.
	WAL []WALSlot
}

// WALSlot is the state of one WAL relay's replication slot.
type WALSlot struct {
	Slot string
	// Exists tells the slot is on the server (it may have been dropped).
	Exists bool
	// Active tells a relay streams it now. While none does, the server
	// keeps all WAL since the slot's position: the disk fills.
	Active bool
	// RetainedBytes is the WAL the server keeps for the slot (from its
	// restart_lsn); LagBytes how far its confirmed position is behind the
	// server's WAL.
	RetainedBytes, LagBytes int64
	// WALStatus is the server's word on the retained WAL (reserved,
	// extended, unreserved, lost): "lost" means the slot was invalidated
	// (max_slot_wal_keep_size) and events must be replayed.
	WALStatus string
}

// RelayShare is what one fast relay subscription owns.
type RelayShare struct {
	Relay      string // RelayID/instance/subscription
	Topic      string // "" for a relay of every topic
	Partitions int
	// LeaseUntil is when the lease of its partitions ends unless renewed;
	// before the time of reading when it lapsed (the relay stopped
	// renewing: another takes them at its next rebalance).
	LeaseUntil time.Time
	// Locks tells it runs with a liveness lock (not poll-only, not of an
	// earlier version); Live that its session holds it. A relay that Locks
	// and is not Live died or lost its connection: another takes its
	// partitions within seconds. One that does not Lock is taken over when
	// its lease ends.
	Locks, Live bool
	// Lapsed tells the lease had ended at the time of reading.
	Lapsed bool
}

// Age is how long the oldest pending event has waited at now.
func (b Backlog) Age(now time.Time) time.Duration {
	if b.OldestPending.IsZero() {
		return 0
	}
	return now.Sub(b.OldestPending)
}

// ReadBacklog reads the backlog of the outbox table (schema.OutboxTable
// and schema.DeadLetterTable when the names are empty), on PostgreSQL or
// MySQL (where Relays are the poll relays, and there are no WAL slots).
// It counts at most
// outboxdb.DefaultMaxRows pending rows, and as many open dead letters of
// each source (the relay's, the consumers'): PendingCapped tells the count
// stopped there.
func ReadBacklog(ctx context.Context, db *sql.DB, table, deadLetterTable string) (Backlog, error) {
	t, err := statusTables(db, table, deadLetterTable)
	if err != nil {
		return Backlog{}, err
	}
	p, err := outboxdb.ReadPending(ctx, db, t, 0)
	if err != nil {
		return Backlog{}, fmt.Errorf("relay: %w", err)
	}
	b := Backlog{Pending: p.Count, PendingCapped: p.Capped, OldestPending: p.Oldest}
	open, err := outboxdb.ReadOpenDeadLetters(ctx, db, t, 0)
	if err != nil {
		return Backlog{}, fmt.Errorf("relay: %w", err)
	}
	b.DeadLetters = open.Relay + open.Consumer
	partitions, shares, err := outboxdb.ReadShares(ctx, db, t)
	if err != nil {
		return Backlog{}, fmt.Errorf("relay: %w", err)
	}
	b.Partitions = partitions
	for _, s := range shares {
		b.Relays = append(b.Relays, RelayShare(s))
	}
	if b.WAL, err = ReadWALSlots(ctx, db, t.Outbox); err != nil {
		return Backlog{}, err
	}
	return b, nil
}

// statusTables names the tables of the reads of the backlog, in db's
// dialect: PostgreSQL's or MySQL's.
func statusTables(db *sql.DB, table, deadLetterTable string) (outboxdb.Tables, error) {
	t := outboxdb.New(table, deadLetterTable)
	if t.Dialect = outboxdb.DialectOfDB(db); t.Dialect == outboxdb.SQLite {
		return t, errors.New("relay: the backlog is read on PostgreSQL and MySQL; on SQLite not yet")
	}
	return t, nil
}

// TopicPending is the pending events of one topic.
type TopicPending struct {
	Topic         string
	Pending       int64
	OldestPending time.Time
}

// ReadPendingByTopic counts the pending events of table
// (schema.OutboxTable when empty) per topic, leaving out those the WAL path
// delivered, among the first outboxdb.DefaultMaxRows pending rows.
func ReadPendingByTopic(ctx context.Context, db *sql.DB, table string) ([]TopicPending, error) {
	t, err := statusTables(db, table, "")
	if err != nil {
		return nil, err
	}
	p, err := outboxdb.ReadPending(ctx, db, t, 0)
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	var out []TopicPending
	for _, t := range p.Topics {
		out = append(out, TopicPending(t))
	}
	return out, nil
}

// ReadWALSlots reads the slots of the WAL relays of table (schema.OutboxTable
// when empty): those that ever streamed it, from its progress table,
// whatever their publication is named; none on another database than
// PostgreSQL.
func ReadWALSlots(ctx context.Context, db *sql.DB, table string) ([]WALSlot, error) {
	t := outboxdb.New(table, "")
	t.Dialect = outboxdb.DialectOfDB(db) // none but on PostgreSQL
	slots, err := outboxdb.ReadSlots(ctx, db, t)
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	var out []WALSlot
	for _, s := range slots {
		out = append(out, WALSlot(s))
	}
	return out, nil
}
