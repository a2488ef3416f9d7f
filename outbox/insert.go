package outbox

import (
	"context"
	stdsql "database/sql"
	"errors"
	"fmt"
	"strings"

	"entgo.io/ent/dialect"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// NotifyChannel is the LISTEN/NOTIFY channel of an outbox table. Emit
// notifies it in the emitting transaction, so the wake-up is sent when,
// and only if, the transaction commits; the fast relay listens on it.
func NotifyChannel(table string) string { return table }

// insertColumns is how many parameters a row takes.
const insertColumns = 9

// InsertQuery builds the INSERT of rows into table, in their order, as
// Emit writes them (the compatible relay path's schema adapter uses it
// too). A row whose event id is already present is skipped (ON CONFLICT
// DO NOTHING), so that a duplicate does not abort the caller's
// transaction; the statement returns one row per row inserted, and
// notifies NotifyChannel(table) once per row at commit.
func InsertQuery(table string, rows []Row) (string, []any, error) {
	var (
		q    strings.Builder
		args = make([]any, 0, insertColumns*len(rows))
	)
	q.WriteString("WITH inserted AS (INSERT INTO " + pgsql.QuoteIdent(table) +
		" (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers, readable_from) VALUES ")
	for i, r := range rows {
		headers, err := encodeHeaders(r.Headers)
		if err != nil {
			return "", nil, fmt.Errorf("outbox: event %s: %w", r.EventID, err)
		}
		if i > 0 {
			q.WriteByte(',')
		}
		n := i * insertColumns
		fmt.Fprintf(&q, "($%d,$%d,$%d,$%d,$%d,$%d,$%d::jsonb,$%d::jsonb,$%d::bigint)", n+1, n+2, n+3, n+4, n+5, n+6, n+7, n+8, n+9)
		args = append(args, r.EventID.String(), r.Name, r.Version, r.Topic, r.AggregateType, r.AggregateID,
			string(r.Payload), headers, readableFromColumn(r.Event))
	}
	// One statement: the insert, and a notification the fast relay gets
	// at commit. It returns one row per inserted row, so the rows affected
	// still tell a duplicate apart.
	q.WriteString(" ON CONFLICT (event_id) DO NOTHING RETURNING 1) SELECT pg_notify(" +
		pgsql.QuoteLiteral(NotifyChannel(table)) + ", '') FROM inserted")
	return q.String(), args, nil
}

// insert writes rows in one statement. A row whose event id is already in
// the outbox fails it with events.ErrDuplicateEventID, the transaction
// still usable.
func insert(ctx context.Context, drv dialect.ExecQuerier, table string, rows []Row) error {
	query, args, err := InsertQuery(table, rows)
	if err != nil {
		return err
	}
	var res stdsql.Result
	if err := drv.Exec(ctx, query, args, &res); err != nil {
		if len(rows) == 1 {
			return fmt.Errorf("outbox: writing %q event %s: %w", rows[0].Name, rows[0].EventID, err)
		}
		return fmt.Errorf("outbox: writing %d events: %w", len(rows), err)
	}
	if res == nil {
		return errors.New("outbox: the driver returned no result")
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("outbox: counting the rows written: %w", err)
	}
	if int(n) == len(rows) {
		return nil
	}
	if len(rows) == 1 {
		return fmt.Errorf("%w: %s (%q)", events.ErrDuplicateEventID, rows[0].EventID, rows[0].Name)
	}
	return fmt.Errorf("%w: %d of %d events were already in the outbox", events.ErrDuplicateEventID, len(rows)-int(n), len(rows))
}
