package outboxdb

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

var (
	// promoteDueSQLite reads up to ?1 due events of the scheduled table,
	// in due order.
	promoteDueSQLite = defineOnly("promote/due", SQLite, func(t Tables) string {
		return `SELECT s.id, s.event_id, s.event_name, s.event_version, s.topic, s.aggregate_type, s.aggregate_id, s.payload,
		s.headers, s.deliver_at, s.readable_from
		FROM ` + pgsql.QuoteIdent(t.Scheduled) + ` s WHERE s.cancelled_at IS NULL AND julianday(s.deliver_at) <= julianday('now')
		AND NOT EXISTS (SELECT 1 FROM ` + pgsql.QuoteIdent(t.Outbox) + ` o WHERE o.event_id = s.event_id)
		ORDER BY julianday(s.deliver_at), s.id LIMIT ?1`
	})
	// promoteDeleteSQLite deletes scheduled event ?1, promoted.
	promoteDeleteSQLite = defineOnly("promote/delete", SQLite, func(t Tables) string {
		return `DELETE FROM ` + pgsql.QuoteIdent(t.Scheduled) + ` WHERE id = ?1`
	})
)

// promoteSerial is Promote on SQLite and MySQL: in one transaction, the
// due events are read, written to the outbox as Emit writes (numbered
// from the counters), and deleted from the scheduled table. On SQLite one
// transaction writes at a time: no lock to take, no row to skip. On MySQL
// the read locks the events it takes and skips those another promotion
// or a Cancel holds.
func (t Tables) promoteSerial(ctx context.Context, q Querier, limit int) (int, error) {
	db, ok := q.(*sql.DB)
	if !ok {
		return 0, errors.New("promoting on " + t.Dialect.String() + " takes a *sql.DB")
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	rows, ids, err := t.dueSQLite(ctx, tx, limit)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	emit := Tables{Outbox: t.Outbox, Sequences: t.Sequences, Dialect: t.Dialect}
	if err := emit.EmitAhead(ctx, entsql.Conn{ExecQuerier: tx}, rows, false); err != nil {
		return 0, err
	}
	for _, w := range emit.EmitWrites(rows) {
		if _, err := tx.ExecContext(ctx, w.SQL, w.Args...); err != nil {
			return 0, err
		}
	}
	for _, id := range ids {
		if _, err := t.boundExec(tx).ExecContext(ctx, promoteDeleteSQLite.SQL(t), id); err != nil {
			return 0, err
		}
	}
	return len(rows), tx.Commit()
}

// dueSQLite reads up to limit due events as the emit path writes them,
// and their ids in the scheduled table.
func (t Tables) dueSQLite(ctx context.Context, tx *sql.Tx, limit int) ([]EmitRow, []int64, error) {
	rs, err := t.bound(tx).QueryContext(ctx, promoteDueSQLite.SQL(t), limit)
	if err != nil {
		return nil, nil, err
	}
	defer rs.Close()
	var (
		rows []EmitRow
		ids  []int64
	)
	for rs.Next() {
		var (
			id       int64
			r        EmitRow
			payload  []byte
			headers  sql.NullString
			due      time.Time
			readable sql.NullInt64
		)
		if err := rs.Scan(&id, &r.EventID, &r.Name, &r.Version, &r.Topic, &r.AggregateType, &r.AggregateID, &payload,
			&headers, &due, &readable); err != nil {
			return nil, nil, err
		}
		r.Payload = strings.Clone(string(payload))
		r.Headers = withDeliverAt(headers.String, due)
		if readable.Valid {
			r.ReadableFrom = readable.Int64
		}
		rows, ids = append(rows, r), append(ids, id)
	}
	return rows, ids, rs.Err()
}

// withDeliverAt is the headers of a promoted event, the time it was due
// added (outbox_deliver_at, in the form PostgreSQL's promotion writes it);
// headers that are no JSON object are replaced, as there.
func withDeliverAt(headers string, due time.Time) string {
	h := map[string]any{}
	if json.Unmarshal([]byte(headers), &h) != nil || h == nil {
		h = map[string]any{}
	}
	h["outbox_deliver_at"] = due.UTC().Format("2006-01-02T15:04:05.000000Z")
	b, _ := json.Marshal(h) // a map of JSON values encodes
	return string(b)
}
