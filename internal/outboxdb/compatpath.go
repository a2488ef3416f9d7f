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
	})
	_ = define("compatpath/ack-delivered", func(t Tables) string {
		return t.CompatAckDelivered(3) + "/* the offsets adapter's ack query */"
	})
)

// CompatSelect is the next batch (at most batch rows) of committed rows
// after the offset that nextOffset reads (a query returning
// offset_acked and last_processed_transaction_id), in commit order. Like
// watermill-sql's default PostgreSQL schema it only reads transactions
// older than the snapshot's xmin, so a row committed late by a long
// transaction is never skipped.
func (t Tables) CompatSelect(nextOffset string, batch int) string {
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
