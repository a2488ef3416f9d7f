package relay

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/schema"
)

// Backlog is what the relay still has to do.
type Backlog struct {
	// Pending counts committed events not yet delivered.
	Pending int64
	// OldestPending is when the oldest pending event was written; zero
	// when nothing is pending.
	OldestPending time.Time
	// DeadLetters counts events set aside and not yet retried or
	// discarded by an operator.
	DeadLetters int64
	// Relays is the fast relays holding partitions, by name, lapsed leases
	// included; none before a fast relay first ran.
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
// and schema.DeadLetterTable when the names are empty).
func ReadBacklog(ctx context.Context, db *sql.DB, table, deadLetterTable string) (Backlog, error) {
	if table == "" {
		table = schema.OutboxTable
	}
	if deadLetterTable == "" {
		deadLetterTable = schema.DeadLetterTable
	}
	var (
		b      Backlog
		oldest sql.NullTime
	)
	// A dead-letter table of an earlier version has no columns for what an
	// operator did: all its letters are open.
	var settledColumns bool
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1)
		AND attname = 'discarded_at' AND attnum > 0 AND NOT attisdropped)`, pgsql.QuoteIdent(deadLetterTable)).
		Scan(&settledColumns); err != nil {
		return Backlog{}, fmt.Errorf("relay: reading the dead-letter table: %w", err)
	}
	open := ""
	if settledColumns {
		open = " WHERE discarded_at IS NULL AND retried_at IS NULL"
	}
	// Rows the WAL path delivered keep delivered_at NULL: left out.
	notWAL, err := notWALDelivered(ctx, db, table, "o")
	if err != nil {
		return Backlog{}, err
	}
	err = db.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM `+pgsql.QuoteIdent(table)+` o WHERE delivered_at IS NULL`+notWAL+`),
		(SELECT min(created_at) FROM `+pgsql.QuoteIdent(table)+` o WHERE delivered_at IS NULL`+notWAL+`),
		(SELECT count(*) FROM `+pgsql.QuoteIdent(deadLetterTable)+open+`)`).Scan(&b.Pending, &oldest, &b.DeadLetters)
	if err != nil {
		return Backlog{}, fmt.Errorf("reading the outbox backlog: %w", err)
	}
	b.OldestPending = oldest.Time
	if err := readShares(ctx, db, table, &b); err != nil {
		return Backlog{}, err
	}
	if notWAL != "" {
		if b.WAL, err = ReadWALSlots(ctx, db, table); err != nil {
			return Backlog{}, err
		}
	}
	return b, nil
}

// readShares reads which fast relays own which partitions, if any ran.
func readShares(ctx context.Context, db *sql.DB, table string, b *Backlog) error {
	parts := table + "_partitions"
	exists, err := tableExists(ctx, db, parts)
	if err != nil {
		return err
	}
	if !exists {
		return nil
	}
	if err := db.QueryRowContext(ctx, `SELECT count(DISTINCT partition) FROM `+pgsql.QuoteIdent(parts)).Scan(&b.Partitions); err != nil {
		return fmt.Errorf("reading the relays: %w", err)
	}
	members := table + "_relays"
	rows, err := db.QueryContext(ctx, `SELECT p.relay, p.topic, count(*), max(p.until), max(p.until) < now(),
		coalesce(bool_or(m.live_lock), false), `+liveHeldExpr(table, "p.relay")+`
		FROM `+pgsql.QuoteIdent(parts)+` p LEFT JOIN `+pgsql.QuoteIdent(members)+` m ON m.topic = p.topic AND m.relay = p.relay
		WHERE p.relay <> '' GROUP BY p.relay, p.topic ORDER BY p.topic, p.relay`)
	if err != nil {
		return fmt.Errorf("reading the relays: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var r RelayShare
		if err := rows.Scan(&r.Relay, &r.Topic, &r.Partitions, &r.LeaseUntil, &r.Lapsed, &r.Locks, &r.Live); err != nil {
			return fmt.Errorf("reading the relays: %w", err)
		}
		b.Relays = append(b.Relays, r)
	}
	return rows.Err()
}

// TopicPending is the pending events of one topic.
type TopicPending struct {
	Topic         string
	Pending       int64
	OldestPending time.Time
}

// ReadPendingByTopic counts the pending events of table
// (schema.OutboxTable when empty) per topic, leaving out those the WAL path
// delivered.
func ReadPendingByTopic(ctx context.Context, db *sql.DB, table string) ([]TopicPending, error) {
	if table == "" {
		table = schema.OutboxTable
	}
	notWAL, err := notWALDelivered(ctx, db, table, "o")
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, `SELECT topic, count(*), min(created_at) FROM `+pgsql.QuoteIdent(table)+` o
		WHERE delivered_at IS NULL`+notWAL+` GROUP BY topic ORDER BY topic`)
	if err != nil {
		return nil, fmt.Errorf("reading the backlog per topic: %w", err)
	}
	defer rows.Close()
	var out []TopicPending
	for rows.Next() {
		var t TopicPending
		if err := rows.Scan(&t.Topic, &t.Pending, &t.OldestPending); err != nil {
			return nil, fmt.Errorf("reading the backlog per topic: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}
