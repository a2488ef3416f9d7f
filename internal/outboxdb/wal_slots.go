package outboxdb

import (
	"context"
	"fmt"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// WALSlot is the state of one WAL relay's replication slot.
type WALSlot struct {
	Slot string
	// Exists tells the slot is on the server (it may have been dropped);
	// Active that a relay streams it now.
	Exists, Active bool
	// RetainedBytes is the WAL the server keeps for the slot (from its
	// restart_lsn); LagBytes how far its confirmed position is behind the
	// server's WAL.
	RetainedBytes, LagBytes int64
	// WALStatus is the server's word on the retained WAL (reserved,
	// extended, unreserved, lost).
	WALStatus string
}

// MaxSlots bounds the slots a read lists (the server's
// max_replication_slots is ten by default).
const MaxSlots = 1000

// ReadSlots reads the slots of the WAL relays of t: those that ever
// streamed it, as the relays registered them in the progress table, by
// name, whatever their publication is named; none before a WAL relay first
// ran, and on another database than PostgreSQL. A slot dropped from the server is listed with Exists false.
func ReadSlots(ctx context.Context, q Querier, t Tables) ([]WALSlot, error) {
	if t.Dialect != Postgres {
		return nil, nil // the WAL path is PostgreSQL's
	}
	exists, err := TableExists(ctx, q, t.WALProgress())
	if err != nil || !exists {
		return nil, err
	}
	rows, err := q.QueryContext(ctx, walSlots.SQL(t), MaxSlots)
	if err != nil {
		return nil, fmt.Errorf("reading the replication slots: %w", err)
	}
	defer rows.Close()
	var slots []WALSlot
	for rows.Next() {
		var s WALSlot
		if err := rows.Scan(&s.Slot, &s.Exists, &s.Active, &s.RetainedBytes, &s.LagBytes, &s.WALStatus); err != nil {
			return nil, fmt.Errorf("reading the replication slots: %w", err)
		}
		slots = append(slots, s)
	}
	return slots, rows.Err()
}

// walSlots reads each WAL relay's slot, up to $1 of them.
var walSlots = define("walpath/slots", func(t Tables) string {
	return `SELECT p.slot, s.slot_name IS NOT NULL, coalesce(s.active, false),
		coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn), 0)::bigint,
		coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn), 0)::bigint,
		coalesce(s.wal_status, '')
		FROM ` + pgsql.QuoteIdent(t.WALProgress()) + ` p LEFT JOIN pg_replication_slots s ON s.slot_name = p.slot
		ORDER BY p.slot LIMIT $1`
})
