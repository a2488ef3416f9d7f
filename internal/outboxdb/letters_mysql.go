package outboxdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/entoutbox/entoutbox/internal/retention"
)

// The operator's repairs of dead letters on MySQL (MySQL 8, MariaDB
// 10.6+): the letters read, locked and marked, the outbox row of an event
// read and deleted, the positions settled (serially: MySQL's UPDATE takes
// no WITH that writes, and returns nothing); and the cleanup's deletes of
// old rows.

// onPostgresAndMySQL defines a statement whose text render builds for
// either database from t.Dialect.
func onPostgresAndMySQL(name string, render func(t Tables) string) *Statement {
	return define(name, render).also(MySQL, render)
}

func init() {
	q := MySQL.quote
	// The ids come first and each letter is found by its key, as the
	// relay's acks find their rows (mysqlOutboxRows): IN (subquery) may
	// scan, and lock, the whole table.
	lettersLock.also(MySQL, func(t Tables) string {
		return `SELECT ` + t.letterColumns() + ` FROM (SELECT j.lid FROM JSON_TABLE(?1, '$[*]' COLUMNS (lid BIGINT PATH '$')) j) d
		STRAIGHT_JOIN ` + q(t.DeadLetters) + ` FORCE INDEX (PRIMARY) ON id = d.lid ORDER BY id FOR UPDATE`
	})
	lettersRead.also(MySQL, func(t Tables) string {
		return `SELECT ` + t.letterColumns() + ` FROM ` + q(t.DeadLetters) + ` WHERE id = ?1`
	})
	lettersOfEvent.also(MySQL, func(t Tables) string {
		return `SELECT ` + t.letterColumns() + ` FROM ` + q(t.DeadLetters) +
			` WHERE event_id = ?1 OR retried_event_id = ?1 ORDER BY id`
	})
	// retried_event_id is set before event_id is cleared: MySQL's SET
	// reads the new values of the columns set before.
	lettersMarkRetried.also(MySQL, func(t Tables) string {
		return `UPDATE ` + q(t.DeadLetters) + ` SET retried_at = ?2,
		retried_event_id = event_id, event_id = NULL WHERE id = ?1`
	})
	lettersMarkDiscarded.also(MySQL, func(t Tables) string {
		return `UPDATE ` + q(t.DeadLetters) + ` SET discarded_at = ?2, discard_note = ?3
		WHERE id = ?1`
	})
	rowsDelete.also(MySQL, func(t Tables) string { return `DELETE FROM ` + q(t.Outbox) + ` WHERE id = ?1` })
	scheduledDeleteCancelled.also(MySQL, func(t Tables) string { return mysqlDeleteOlder(t.Scheduled, "cancelled_at") })
	settlePositionsOf.also(MySQL, func(t Tables) string {
		return `SELECT consumer FROM ` + q(t.Positions) + `
		WHERE topic = ?1 AND aggregate_type = ?2 AND aggregate_id = ?3 ORDER BY consumer`
	})
}

// settleLockPosition locks the position of consumer ?1 on topic ?2,
// aggregate ?3/?4, before the serial settle reads it.
var settleLockPosition = defineOnly("settle/lock-position", MySQL, func(t Tables) string {
	return `SELECT id FROM ` + MySQL.quote(t.Positions) + `
		WHERE consumer = ?1 AND topic = ?2 AND aggregate_type = ?3 AND aggregate_id = ?4 FOR UPDATE`
})

// mysqlDeleteOlder deletes, oldest id first, at most ?2 rows of table
// whose timeColumn is before ?1 (MySQL's DELETE takes an ORDER BY and a
// LIMIT itself).
func mysqlDeleteOlder(table, timeColumn string) string {
	return `DELETE FROM ` + MySQL.quote(table) + ` WHERE ` + MySQL.quote(timeColumn) + ` < ?1 ORDER BY id LIMIT ?2`
}

// DeleteOlder is the package's DeleteOlder in t's dialect.
func (t Tables) DeleteOlder(ctx context.Context, e Execer, table, timeColumn string, cutoff time.Time, batch int) (int64, error) {
	if t.Dialect != MySQL {
		return DeleteOlder(ctx, e, table, timeColumn, cutoff, batch)
	}
	if batch <= 0 {
		batch = 1000
	}
	n, err := retention.InBatches(ctx, t.boundExec(e), mysqlDeleteOlder(table, timeColumn), cutoff, batch)
	if err != nil {
		return n, fmt.Errorf("deleting old rows of %s: %w", table, err)
	}
	return n, nil
}

// settleSerial is Settle on MySQL: the position locked, then settled in
// steps (SettleSteps). q writes too (a transaction).
func (t Tables) settleSerial(ctx context.Context, q Querier, consumer, topic, aggregateType, aggregateID string) (Settled, error) {
	e, ok := q.(Execer)
	if !ok {
		return Settled{}, errors.New("settling a position on MySQL takes a transaction")
	}
	var id int64
	err := queryRow(ctx, t.bound(q), settleLockPosition.SQL(t), []any{consumer, topic, aggregateType, aggregateID}, &id)
	if err != nil {
		return Settled{}, noRowsNil(err) // no position: nothing to settle
	}
	return t.SettleSteps(ctx, entsql.Conn{ExecQuerier: struct {
		Querier
		Execer
	}{q, e}}, consumer, topic, aggregateType, aggregateID)
}

// SettleSteps is SettleQuery's work on SQLite and MySQL, in drv's
// transaction, which holds the position's lock: where the position of
// consumer on the aggregate is to be is read (SettleTargetQuery), and
// written when it differs (SettleUpdateQuery).
func (t Tables) SettleSteps(ctx context.Context, drv dialect.ExecQuerier, consumer, topic, aggregateType, aggregateID string) (Settled, error) {
	var s Settled
	drv = Bound(drv, t.Dialect)
	var rows entsql.Rows
	if err := drv.Query(ctx, t.SettleTargetQuery(), []any{consumer, topic, aggregateType, aggregateID}, &rows); err != nil {
		return s, err
	}
	var (
		id, to                  int64
		held, wasHeld           sql.NullInt64
		heldEvent, wasHeldEvent sql.NullString
	)
	if s.Found = rows.Next(); s.Found {
		if err := rows.Scan(&id, &s.LastSeq, &to, &held, &heldEvent, &wasHeld, &wasHeldEvent); err != nil {
			rows.Close()
			return s, err
		}
	}
	if err := rows.Close(); err != nil || !s.Found {
		return s, err
	}
	if to != s.LastSeq || held != wasHeld || heldEvent != wasHeldEvent {
		var res sql.Result
		if err := drv.Exec(ctx, t.SettleUpdateQuery(), []any{id, to, held, heldEvent}, &res); err != nil {
			return s, err
		}
		s.Changed = true
	}
	s.LastSeq, s.HeldSeq = to, held.Int64
	return s, nil
}

// noRowsNil is err, nil when it is sql.ErrNoRows.
func noRowsNil(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	return err
}
