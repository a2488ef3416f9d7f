package outboxdb

import (
	"context"
	"database/sql"
)

// The relay's statements on MySQL (MySQL 8, MariaDB 10.6+): the poll path
// and its lease, the dead letters of rows it sets aside, the promotion of
// scheduled events, and the catalog reads of its start. Times are UTC
// datetime(6) columns (see schema), compared with UTC_TIMESTAMP(6).

func init() {
	q := MySQL.quote
	PollPending.also(MySQL, func(t Tables) string { return mysqlPending(t, "") })
	PollDelivered.also(MySQL, func(t Tables) string {
		return `UPDATE ` + t.mysqlOutboxRows("?1") + ` SET o.delivered_at = ` + mysqlNow
	})
	PollDeliveredDelete.also(MySQL, func(t Tables) string {
		return `DELETE o FROM ` + t.mysqlOutboxRows("?1")
	})
	PollFailed.also(MySQL, func(t Tables) string {
		return `UPDATE ` + q(t.Outbox) + ` SET attempts = ?2,
		available_at = ` + mysqlNow + ` + INTERVAL ?3 * 1000 MICROSECOND, last_error = ?4 WHERE id = ?1`
	})
	// The lease table holds a row per partition on MySQL (see
	// poll_partitions.go).
	PollLeaseCreate.also(MySQL, func(t Tables) string {
		return `CREATE TABLE IF NOT EXISTS ` + q(t.PollLease()) + ` (
		id INT PRIMARY KEY, holder VARCHAR(255) NOT NULL, ` + "`until`" + ` DATETIME(6) NOT NULL)`
	})

}

// The dead letters of rows set aside, the promotion of scheduled events,
// and the catalog reads of the relay's start, on MySQL.
func init() {
	q := MySQL.quote
	moveToLetters.also(MySQL, func(t Tables) string { // then moveDeleteRow, in the same transaction
		return `INSERT INTO ` + q(t.DeadLetters) + ` (event_id, source, event_name, event_version, topic,
			aggregate_type, aggregate_id, aggregate_seq, payload, headers, reason, attempts, created_at)
		SELECT event_id, 'relay', event_name, event_version, topic, aggregate_type, aggregate_id, aggregate_seq,
			CAST(payload AS BINARY), headers, ?2, GREATEST(attempts, ?3), ` + mysqlNow + `
		FROM ` + q(t.Outbox) + ` WHERE id = ?1`
	})
	moveDeleteRow.also(MySQL, func(t Tables) string {
		return `DELETE FROM ` + q(t.Outbox) + ` WHERE id = ?1`
	})

	promoteDueSQLite.also(MySQL, func(t Tables) string {
		return `SELECT s.id, s.event_id, s.event_name, s.event_version, s.topic, s.aggregate_type, s.aggregate_id, s.payload,
		s.headers, s.deliver_at, s.readable_from
		FROM ` + q(t.Scheduled) + ` s WHERE s.cancelled_at IS NULL AND s.deliver_at <= ` + mysqlNow + `
		AND NOT EXISTS (SELECT 1 FROM ` + q(t.Outbox) + ` o WHERE o.event_id = s.event_id)
		ORDER BY s.deliver_at, s.id LIMIT ?1 FOR UPDATE SKIP LOCKED`
	})
	promoteDeleteSQLite.also(MySQL, func(t Tables) string {
		return `DELETE FROM ` + q(t.Scheduled) + ` WHERE id = ?1`
	})
	promoteNextDue.also(MySQL, func(t Tables) string {
		return `SELECT TIMESTAMPDIFF(MICROSECOND, ` + mysqlNow + `, s.deliver_at)
		FROM ` + q(t.Scheduled) + ` s WHERE s.cancelled_at IS NULL
		AND NOT EXISTS (SELECT 1 FROM ` + q(t.Outbox) + ` o WHERE o.event_id = s.event_id)
		ORDER BY s.deliver_at, s.id LIMIT 1`
	})

	existsTable.also(MySQL, func(Tables) string {
		return `SELECT EXISTS (SELECT 1 FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?1)`
	})
	existsMissingColumns.also(MySQL, func(Tables) string {
		return `SELECT EXISTS (SELECT 1 FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?1),
		COALESCE((SELECT GROUP_CONCAT(j.c ORDER BY j.n SEPARATOR ', ')
			FROM JSON_TABLE(CONCAT('["', REPLACE(?2, ',', '","'), '"]'), '$[*]' COLUMNS (n FOR ORDINALITY, c VARCHAR(64) PATH '$')) j
			WHERE NOT EXISTS (SELECT 1 FROM information_schema.columns k
				WHERE k.table_schema = DATABASE() AND k.table_name = ?1 AND k.column_name = j.c)), '')`
	})
	recentTopics.also(MySQL, func(t Tables) string {
		return `SELECT DISTINCT topic FROM (SELECT topic FROM ` + q(t.Outbox) +
			` ORDER BY id DESC LIMIT ?1) recent ORDER BY topic`
	})
}

// mysqlOutboxRows are the outbox rows (o) whose ids are the JSON array
// param, for a multi-table UPDATE or DELETE, which locks every row it
// reads. The ids come first and each row is found by its key
// (STRAIGHT_JOIN, FORCE INDEX): the optimizer would otherwise scan a small
// outbox, locking its rows, and wait for a transaction that wrote one and
// has not committed.
func (t Tables) mysqlOutboxRows(param string) string {
	return `(` + mysqlIDs(param) + `) d STRAIGHT_JOIN ` + t.Quote(t.Outbox) + ` o FORCE INDEX (PRIMARY) ON o.id = d.id`
}

// mysqlPending is PollPending's MySQL form, the rows also under filter
// when there is one.
func mysqlPending(t Tables, filter string) string {
	if filter != "" {
		filter = " AND " + filter
	}
	return `SELECT id, event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers,
		COALESCE(readable_from, 0), COALESCE(aggregate_seq, 0), created_at, attempts,
		GREATEST(0, TIMESTAMPDIFF(MICROSECOND, ` + mysqlNow + `, available_at) DIV 1000)
		FROM ` + MySQL.quote(t.Outbox) + ` WHERE delivered_at IS NULL AND id > ?1` + filter + ` ORDER BY id LIMIT ?2`
}

// mysqlIDs is the ids of the JSON array param (the poll path's acks) as
// a subquery.
func mysqlIDs(param string) string {
	return `SELECT j.id FROM JSON_TABLE(` + param + `, '$[*]' COLUMNS (id BIGINT PATH '$')) j`
}

// bound is q running t's statements, each bound (Bind) on its way.
func (t Tables) bound(q Querier) Querier {
	if t.Dialect != MySQL {
		return q
	}
	return boundQuerier{q}
}

type boundQuerier struct{ Querier }

func (b boundQuerier) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	query, args = Bind(MySQL, query, args)
	return b.Querier.QueryContext(ctx, query, args...)
}

// boundExec is e running t's statements, each bound (Bind) on its way.
func (t Tables) boundExec(e Execer) Execer {
	if t.Dialect != MySQL {
		return e
	}
	return boundExecer{e}
}

type boundExecer struct{ Execer }

func (b boundExecer) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	query, args = Bind(MySQL, query, args)
	return b.Execer.ExecContext(ctx, query, args...)
}
