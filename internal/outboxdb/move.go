package outboxdb

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// MoveToDeadLetters moves outbox row id to the dead-letter table with
// reason and at least attempts attempts, in one statement: the row is
// never in both tables, nor in neither. It tells whether the row was
// there to move. A row moves once: a second move of it, after a crash or
// by another relay, finds nothing and writes nothing (and the outbox
// holds one row per event id).
func (t Tables) MoveToDeadLetters(ctx context.Context, e Execer, id int64, reason string, attempts int) (bool, error) {
	if t.Dialect != Postgres {
		return t.moveToDeadLettersSQLite(ctx, e, id, reason, attempts)
	}
	res, err := e.ExecContext(ctx, moveToLetters.SQL(t), id, reason, attempts)
	if err != nil {
		return false, fmt.Errorf("moving row %d to %s: %w", id, t.DeadLetters, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("moving row %d to %s: %w", id, t.DeadLetters, err)
	}
	return n > 0, nil
}

// CarriedRow is an outbox row as a read path carried it, for the dead
// letter of a row the outbox table no longer holds.
type CarriedRow struct {
	ID                         int64 // for errors only: the row is gone
	EventID                    uuid.UUID
	Name                       string
	Version                    int
	Topic                      string
	AggregateType, AggregateID string
	AggregateSeq               int64 // 0 when it had none
	Payload, Headers           []byte
}

// WriteDeadLetter writes the dead letter of row, which the outbox table no
// longer holds (deleted by hand), from what the read path carried: a row
// read is never skipped without a letter. A zero EventID, empty Headers
// and a zero AggregateSeq are written as NULL. It tells whether it wrote
// one.
//
// It writes nothing when the relay's letter of the event exists, open,
// discarded or retried: a read path that reads a row again after a crash
// (the WAL path streams what its slot did not confirm) finds it gone
// because it moved it itself, and the event has its letter. One letter
// per event and cause, as the consumers write theirs: an advisory lock on
// the event makes two writers of one letter wait for each other, the
// second seeing the first's row. No unique index does it instead, because
// tables written by earlier versions may hold duplicates, which would
// fail its creation.
func (t Tables) WriteDeadLetter(ctx context.Context, db *sql.DB, row CarriedRow, reason string, attempts int) (bool, error) {
	written, err := t.writeDeadLetter(ctx, db, row, reason, attempts)
	if err != nil {
		return false, fmt.Errorf("writing the dead letter of row %d: %w", row.ID, err)
	}
	return written, nil
}

func (t Tables) writeDeadLetter(ctx context.Context, db *sql.DB, row CarriedRow, reason string, attempts int) (bool, error) {
	var eventID any
	if row.EventID != uuid.Nil {
		eventID = row.EventID
	}
	var headers any
	if len(row.Headers) > 0 {
		headers = string(row.Headers)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }()
	if eventID != nil && t.Dialect == Postgres { // SQLite's writers take turns already; MySQL relays one at a time
		if _, err := tx.ExecContext(ctx, moveLockEvent.SQL(t), t.DeadLetters+"/relay/"+row.EventID.String()); err != nil {
			return false, err
		}
	}
	res, err := tx.ExecContext(ctx, moveWriteLetter.SQL(t), eventID, row.Name, row.Version, row.Topic, row.AggregateType, row.AggregateID, row.Payload, headers,
		reason, attempts, sql.NullInt64{Int64: row.AggregateSeq, Valid: row.AggregateSeq > 0})
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	return n > 0, tx.Commit()
}

var (
	// moveToLetters moves outbox row $1 to the dead letters, for reason
	// $2, with at least $3 attempts.
	moveToLetters = define("move/to-dead-letters", func(t Tables) string {
		return `WITH moved AS (DELETE FROM ` + pgsql.QuoteIdent(t.Outbox) + ` WHERE id = $1 RETURNING *)
		INSERT INTO ` + pgsql.QuoteIdent(t.DeadLetters) + ` (event_id, source, event_name, event_version, topic,
			aggregate_type, aggregate_id, aggregate_seq, payload, headers, reason, attempts, created_at)
		SELECT event_id, 'relay', event_name, event_version, topic, aggregate_type, aggregate_id, aggregate_seq,
			convert_to(payload::text, 'UTF8'), headers, $2, GREATEST(attempts, $3), now()
		FROM moved`
	}).also(SQLite, func(t Tables) string { // then moveDeleteRow, in the same transaction
		return `INSERT INTO ` + pgsql.QuoteIdent(t.DeadLetters) + ` (event_id, source, event_name, event_version, topic,
			aggregate_type, aggregate_id, aggregate_seq, payload, headers, reason, attempts, created_at)
		SELECT event_id, 'relay', event_name, event_version, topic, aggregate_type, aggregate_id, aggregate_seq,
			CAST(payload AS BLOB), headers, ?2, MAX(attempts, ?3), ` + sqliteNow + `
		FROM ` + pgsql.QuoteIdent(t.Outbox) + ` WHERE id = ?1`
	})
	// moveDeleteRow deletes outbox row $1, moved to the dead letters.
	moveDeleteRow = defineOnly("move/delete-row", SQLite, func(t Tables) string {
		return `DELETE FROM ` + pgsql.QuoteIdent(t.Outbox) + ` WHERE id = ?1`
	})
	// moveLockEvent takes the transaction's lock on key $1, the letter's
	// table, source and event.
	moveLockEvent = define("move/lock-event", func(Tables) string {
		return `SELECT pg_advisory_xact_lock(hashtextextended($1::text, 0))`
	})
	// moveWriteLetter writes the relay's letter of event $1 (NULL for
	// none) unless it has one: name $2, version $3, topic $4, aggregate
	// $5/$6 numbered $11 (NULL for none), payload $7, headers $8, reason
	// $9, attempts $10.
	moveWriteLetter = define("move/write-letter", func(t Tables) string {
		letters := pgsql.QuoteIdent(t.DeadLetters)
		return `INSERT INTO ` + letters + ` (event_id, source, event_name,
		event_version, topic, aggregate_type, aggregate_id, aggregate_seq, payload, headers, reason, attempts, created_at)
		SELECT $1::uuid, 'relay', $2, $3, $4, $5, $6, $11, $7, $8::jsonb, $9, $10, now()
		WHERE $1::uuid IS NULL OR NOT EXISTS (SELECT 1 FROM ` + letters + `
			WHERE (event_id = $1::uuid OR retried_event_id = $1::uuid) AND source = 'relay')`
	}).also(SQLite, func(t Tables) string {
		letters := pgsql.QuoteIdent(t.DeadLetters)
		return `INSERT INTO ` + letters + ` (event_id, source, event_name,
		event_version, topic, aggregate_type, aggregate_id, aggregate_seq, payload, headers, reason, attempts, created_at)
		SELECT ?1, 'relay', ?2, ?3, ?4, ?5, ?6, ?11, ?7, ?8, ?9, ?10, ` + sqliteNow + `
		WHERE ?1 IS NULL OR NOT EXISTS (SELECT 1 FROM ` + letters + `
			WHERE (event_id = ?1 OR retried_event_id = ?1) AND source = 'relay')`
	})
)

// moveToDeadLettersSQLite is MoveToDeadLetters on SQLite and MySQL, whose
// DELETE cannot feed an INSERT: the copy and the delete in one
// transaction (of e's, or of its own when e is a database).
func (t Tables) moveToDeadLettersSQLite(ctx context.Context, e Execer, id int64, reason string, attempts int) (bool, error) {
	move := func(e Execer) (bool, error) {
		e = t.boundExec(e)
		res, err := e.ExecContext(ctx, moveToLetters.SQL(t), id, reason, attempts)
		if err != nil {
			return false, err
		}
		n, err := res.RowsAffected()
		if err != nil || n == 0 {
			return false, err
		}
		_, err = e.ExecContext(ctx, moveDeleteRow.SQL(t), id)
		return err == nil, err
	}
	var moved bool
	err := inTx(ctx, e, func(e Execer) (err error) {
		moved, err = move(e)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("moving row %d to %s: %w", id, t.DeadLetters, err)
	}
	return moved, nil
}

// inTx runs fn in a transaction: e's own when it is one, else a new one of
// e's database.
func inTx(ctx context.Context, e Execer, fn func(Execer) error) error {
	db, ok := e.(*sql.DB)
	if !ok {
		return fn(e)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}
