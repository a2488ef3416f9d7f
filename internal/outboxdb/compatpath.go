package outboxdb

import (
	"fmt"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// The compatible path's statements: the stock watermill-sql subscriber
// runs them, through the relay's schema and offsets adapters, around the
// offsets adapter's own statements (on <table>_relay_offsets).

// The examples for review: the offsets adapter's query stands as a
// comment, and its arguments as $1 and $2.
var (
	_ = define("compatpath/select", func(t Tables) string {
		return t.CompatSelect("/* the offsets adapter's next offset query */", 100)
	}).also(MySQL, func(t Tables) string {
		return t.CompatSelect(CompatNextOffset.SQL(t), 100)
	})
	_ = define("compatpath/ack-delivered", func(t Tables) string {
		return t.CompatAckDelivered(3) + "/* the offsets adapter's ack query */"
	})
)

// CompatSelect is the next batch (at most batch rows) of committed rows
// after the offset that nextOffset reads.
//
// On PostgreSQL nextOffset returns offset_acked and
// last_processed_transaction_id, and the rows come in commit order. Like
// watermill-sql's default PostgreSQL schema it only reads transactions
// older than the snapshot's xmin, so a row committed late by a long
// transaction is never skipped.
//
// On MySQL (CompatNextOffset) the offset is 0, taken under the consumer
// group's row lock: every read starts at the first undelivered row, in id
// order. An id is taken when a row is written, not when it commits, so a
// row may commit after a later id was delivered; it is undelivered still,
// and the next read takes it. The lock is taken while the statement is
// planned (id's range needs its value), before a row is read: a relay that
// waited for it reads what the one before it marked delivered.
func (t Tables) CompatSelect(nextOffset string, batch int) string {
	if t.Dialect == MySQL {
		return `SELECT id, event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers,
		COALESCE(readable_from, 0), COALESCE(aggregate_seq, 0), created_at
		FROM ` + t.Quote(t.Outbox) + ` WHERE delivered_at IS NULL AND id > (` + nextOffset + `)
		ORDER BY id LIMIT ` + fmt.Sprint(batch)
	}
	return `SELECT * FROM (
		WITH last_processed AS (` + nextOffset + `)
		SELECT id, transaction_id, event_id, event_name, event_version, topic,
			aggregate_type, aggregate_id, payload, headers, created_at, readable_from, aggregate_seq
		FROM ` + pgsql.QuoteIdent(t.Outbox) + `
		WHERE (
			(transaction_id = (SELECT last_processed_transaction_id FROM last_processed)
				AND id > (SELECT offset_acked FROM last_processed))
			OR transaction_id > (SELECT last_processed_transaction_id FROM last_processed)
		)
		AND transaction_id < pg_snapshot_xmin(pg_current_snapshot())
	) AS messages
	ORDER BY transaction_id ASC, id ASC
	LIMIT ` + fmt.Sprint(batch)
}

// CompatAckDelivered is the prefix of the offsets adapter's ack statement
// that stamps delivered_at on the rows whose ids are parameter n (an
// array), in the same statement as the offset moves.
func (t Tables) CompatAckDelivered(n int) string {
	return fmt.Sprintf(`WITH delivered AS (UPDATE %s SET delivered_at = now() WHERE id = ANY($%d) AND delivered_at IS NULL) `,
		pgsql.QuoteIdent(t.Outbox), n)
}

// The compatible path's offsets on MySQL: watermill-sql's MySQL offsets
// table (DefaultMySQLOffsetsAdapter's), one row per consumer group, is
// the lock the group's relays take turns with, and keeps the last id
// acknowledged. The read position is delivered_at, as on the poll path.
var (
	// CompatNextOffset locks consumer group ?1's row and reads 0: every
	// read starts at the first undelivered row (see CompatSelect).
	CompatNextOffset = defineOnly("compatpath/next-offset", MySQL, func(t Tables) string {
		return `SELECT COALESCE((SELECT 0 FROM ` + t.Quote(t.RelayOffsets()) + ` WHERE consumer_group = ?1 FOR UPDATE), 0)`
	})
	// CompatGroupRow makes consumer group ?1's row, so that
	// CompatNextOffset's lock finds one.
	CompatGroupRow = defineOnly("compatpath/group-row", MySQL, func(t Tables) string {
		return `INSERT INTO ` + t.Quote(t.RelayOffsets()) + ` (consumer_group, offset_acked, offset_consumed)
		VALUES (?1, 0, 0) ON DUPLICATE KEY UPDATE consumer_group = consumer_group`
	})
	// CompatAck stamps delivered_at on the rows ?1 (a JSON array of ids)
	// not yet stamped, and records id ?3 acknowledged by consumer group
	// ?2. Each row is found by its key (mysqlOutboxRows). The group's row
	// is joined LEFT: the rows are stamped even without it.
	CompatAck = defineOnly("compatpath/ack", MySQL, func(t Tables) string {
		return `UPDATE ` + t.mysqlOutboxRows("?1") + `
		LEFT JOIN ` + t.Quote(t.RelayOffsets()) + ` g ON g.consumer_group = ?2
		SET o.delivered_at = COALESCE(o.delivered_at, ` + mysqlNow + `), g.offset_acked = ?3, g.offset_consumed = ?3`
	})
)
