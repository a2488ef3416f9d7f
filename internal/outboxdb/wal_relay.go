package outboxdb

import "github.com/entoutbox/entoutbox/internal/pgsql"

// The WAL relay's statements: its progress rows (<table>_wal_progress,
// see delivered.go), the rows written before its slot's start that it
// sends itself, and its reads of the server's publications and slots.
// Logical replication is PostgreSQL's alone: a second database leaves
// them out with the WAL path.

var (
	walCreateProgress = define("walpath/create-progress", func(t Tables) string {
		return `CREATE TABLE IF NOT EXISTS ` + pgsql.QuoteIdent(t.WALProgress()) + ` (
	slot text PRIMARY KEY,
	created pg_snapshot,
	delivered pg_snapshot,
	confirmed_lsn pg_lsn,
	updated_at timestamptz NOT NULL DEFAULT now())`
	})
	walRegisterSlot = define("walpath/register-slot", func(t Tables) string {
		return `INSERT INTO ` + pgsql.QuoteIdent(t.WALProgress()) + ` (slot) VALUES ($1)
	ON CONFLICT (slot) DO NOTHING`
	})
	walSlotCreated = define("walpath/slot-created", func(t Tables) string {
		return `INSERT INTO ` + pgsql.QuoteIdent(t.WALProgress()) + `
	(slot, created, delivered, confirmed_lsn, updated_at) VALUES ($1, $2::pg_snapshot, NULL, NULL, now())
	ON CONFLICT (slot) DO UPDATE SET created = EXCLUDED.created, delivered = NULL, confirmed_lsn = NULL,
		updated_at = now()`
	})
	walProgressSave = define("walpath/progress-save", func(t Tables) string {
		return `INSERT INTO ` + pgsql.QuoteIdent(t.WALProgress()) + `
	(slot, delivered, confirmed_lsn, updated_at) VALUES ($1, $2::pg_snapshot, $3::pg_lsn, now())
	ON CONFLICT (slot) DO UPDATE SET delivered = EXCLUDED.delivered, confirmed_lsn = EXCLUDED.confirmed_lsn,
		updated_at = now()`
	})
	walSlotStart = define("walpath/slot-start", func(t Tables) string {
		return `SELECT created::text FROM ` + pgsql.QuoteIdent(t.WALProgress()) + ` WHERE slot = $1`
	})
	walMarkPreSlot = define("walpath/mark-pre-slot", func(t Tables) string {
		return `UPDATE ` + pgsql.QuoteIdent(t.Outbox) + ` SET delivered_at = now() WHERE id = ANY($1) AND delivered_at IS NULL`
	})
	// The server's own catalogs: a publication of the outbox table's
	// inserts, and the slot's kind and position.
	walPublication = define("walpath/publication", func(Tables) string {
		return `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1),
	EXISTS (SELECT 1 FROM pg_publication p WHERE p.pubname = $1 AND p.pubinsert AND (p.puballtables OR EXISTS (
		SELECT 1 FROM pg_publication_rel pr WHERE pr.prpubid = p.oid AND pr.prrelid = to_regclass($2))))`
	})
	walSlotPosition = define("walpath/slot-position", func(Tables) string {
		return `SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $1`
	})
	walSlotKind = define("walpath/slot-kind", func(Tables) string {
		return `SELECT coalesce(plugin, ''), coalesce(database, '') FROM pg_replication_slots
	WHERE slot_name = $1`
	})
)

// WALSQL is the text of the WAL relay's statements, for one outbox table.
type WALSQL struct {
	// CreateProgress creates the progress table; RegisterSlot adds slot
	// $1's row; SlotCreated records $2 as slot $1's start and forgets what
	// it delivered; ProgressSave records $2 delivered up to WAL position
	// $3; SlotStart reads slot $1's start.
	CreateProgress, RegisterSlot, SlotCreated, ProgressSave, SlotStart string
	// MarkPreSlot marks rows $1 delivered (see PreSlotCount).
	MarkPreSlot string
	// Publication reads whether publication $1 exists and whether it
	// publishes the inserts of table $2; SlotPosition reads slot $1's
	// confirmed position; SlotKind its plugin and database.
	Publication, SlotPosition, SlotKind string
}

// WAL renders the WAL relay's statements on t.
func (t Tables) WAL() WALSQL {
	return WALSQL{CreateProgress: walCreateProgress.SQL(t), RegisterSlot: walRegisterSlot.SQL(t),
		SlotCreated: walSlotCreated.SQL(t), ProgressSave: walProgressSave.SQL(t), SlotStart: walSlotStart.SQL(t),
		MarkPreSlot: walMarkPreSlot.SQL(t), Publication: walPublication.SQL(t), SlotPosition: walSlotPosition.SQL(t),
		SlotKind: walSlotKind.SQL(t)}
}

// The publication of the outbox table's inserts, for review under the
// relay's default name.
var _ = define("walpath/create-publication", func(t Tables) string { return t.CreatePublication(t.Outbox + "_wal") })

// CreatePublication creates the publication name of the outbox table's
// inserts, which the WAL relay's slot streams.
func (t Tables) CreatePublication(name string) string {
	return `CREATE PUBLICATION ` + pgsql.QuoteIdent(name) + ` FOR TABLE ` + pgsql.QuoteIdent(t.Outbox) +
		` WITH (publish = 'insert')`
}

// The rows written before a slot's start, for review, as they read once a
// WAL relay ran.
var (
	_ = define("walpath/pre-slot-count", func(t Tables) string { return t.PreSlotCount(Delivery{progress: t.WALProgress()}) })
	_ = define("walpath/pre-slot-read", func(t Tables) string { return t.PreSlotRead(Delivery{progress: t.WALProgress()}) })
)

// preSlotPending is the condition that outbox row o is pending (d: no
// path, the WAL path through another slot included, delivered it) and its
// transaction committed before the start of the slot that exported
// snapshot snap. Its range on transaction_id lets the (transaction_id, id)
// index serve it.
func preSlotPending(d Delivery, o, snap string) string {
	x := o + ".transaction_id"
	return d.Pending(o) + " AND " + x + " < pg_snapshot_xmax(" + snap + ") AND " +
		"pg_visible_in_snapshot(" + x + ", " + snap + ")"
}

// PreSlotCount counts, up to $2, the rows pending by d that were written
// before the start of the slot that exported snapshot $1.
func (t Tables) PreSlotCount(d Delivery) string {
	return `SELECT count(*) FROM (SELECT 1 FROM ` + pgsql.QuoteIdent(t.Outbox) +
		` o WHERE ` + preSlotPending(d, "o", "$1::pg_snapshot") + ` LIMIT $2) x`
}

// PreSlotRead reads, in id order, at most $3 of those rows after id $2.
func (t Tables) PreSlotRead(d Delivery) string {
	return `SELECT o.id, o.event_id, o.event_name, o.event_version, o.topic,
		o.aggregate_type, o.aggregate_id, o.payload::text, o.headers::text, o.created_at, o.attempts,
		coalesce(o.readable_from, 0), coalesce(o.aggregate_seq, 0)
	FROM ` + pgsql.QuoteIdent(t.Outbox) + ` o WHERE ` + preSlotPending(d, "o", "$1::pg_snapshot") + ` AND o.id > $2
	ORDER BY o.id LIMIT $3`
}
