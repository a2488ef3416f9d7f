package outboxdb

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// Row is a row of the outbox table, as an operator's repairs and the
// console read it.
type Row struct {
	ID            int64
	EventID       uuid.UUID
	EventName     string
	EventVersion  int
	Topic         string
	AggregateType string
	AggregateID   string
	Payload       []byte
	Headers       []byte // the JSON object of the headers; nil for none
	ReadableFrom  int    // 0 when only consumers of EventVersion read it
	AggregateSeq  int64  // 0 when the row has none
	CreatedAt     time.Time
	AvailableAt   time.Time
	Attempts      int
	LastError     string
	DeliveredAt   *time.Time // set by the fast and compatible paths
	// Delivered tells that a read path delivered the row: DeliveredAt is
	// set, or the WAL path delivered it (it sets no DeliveredAt).
	Delivered bool
}

// rowColumns are the columns a Row is scanned from, of the outbox row
// aliased o; Delivered by d.
func rowColumns(d Delivery) string {
	return `o.id, o.event_id, o.event_name, o.event_version, o.topic, o.aggregate_type, o.aggregate_id,
		o.payload::text, o.headers::text, coalesce(o.readable_from, 0), coalesce(o.aggregate_seq, 0), o.created_at,
		o.available_at, o.attempts, coalesce(o.last_error, ''), o.delivered_at, ` + d.Delivered("o")
}

// mysqlRowColumns are rowColumns on MySQL, whose payload and JSON are
// text already, and whose rows are delivered by the poll path alone.
const mysqlRowColumns = `o.id, o.event_id, o.event_name, o.event_version, o.topic, o.aggregate_type, o.aggregate_id,
		o.payload, o.headers, coalesce(o.readable_from, 0), coalesce(o.aggregate_seq, 0), o.created_at,
		o.available_at, o.attempts, coalesce(o.last_error, ''), o.delivered_at, o.delivered_at IS NOT NULL`

func readRows(ctx context.Context, q Querier, query string, args ...any) ([]Row, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Row{}
	for rows.Next() {
		var (
			r       Row
			payload string
			headers sql.NullString
		)
		if err := rows.Scan(&r.ID, &r.EventID, &r.EventName, &r.EventVersion, &r.Topic, &r.AggregateType,
			&r.AggregateID, &payload, &headers, &r.ReadableFrom, &r.AggregateSeq, &r.CreatedAt, &r.AvailableAt,
			&r.Attempts, &r.LastError, &r.DeliveredAt, &r.Delivered); err != nil {
			return nil, err
		}
		r.Payload = []byte(payload)
		if headers.Valid && headers.String != "null" {
			r.Headers = []byte(headers.String)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ReadRowOfEvent reads the outbox row of event id, by the unique index on
// event_id, and with lock locks it until the end of q's transaction (FOR
// UPDATE); sql.ErrNoRows when the outbox holds none. d tells it delivered.
func (t Tables) ReadRowOfEvent(ctx context.Context, q Querier, d Delivery, id uuid.UUID, lock bool) (Row, error) {
	rs, err := readRows(ctx, t.bound(q), rowOfEvent(t, d, lock), id)
	if err != nil {
		return Row{}, fmt.Errorf("reading the outbox row of event %s: %w", id, err)
	}
	if len(rs) == 0 {
		return Row{}, sql.ErrNoRows
	}
	return rs[0], nil
}

// DeleteRow deletes the outbox row id.
func (t Tables) DeleteRow(ctx context.Context, e Execer, id int64) error {
	if _, err := t.boundExec(e).ExecContext(ctx, rowsDelete.SQL(t), id); err != nil {
		return fmt.Errorf("deleting outbox row %d: %w", id, err)
	}
	return nil
}

// DeliveredRange selects delivered rows of the outbox.
type DeliveredRange struct {
	Events      []string  // event names; at least one
	Since       time.Time // written at or after; zero for no bound
	Until       time.Time // written before; zero for no bound
	AggregateID string    // one aggregate only; "" for all
}

// ReadDelivered reads, in id order, at most limit rows after id after
// that r selects and that a read path delivered (d).
func (t Tables) ReadDelivered(ctx context.Context, q Querier, d Delivery, r DeliveredRange, after int64, limit int) ([]Row, error) {
	query, args := deliveredRows(t, d, r)
	rs, err := readRows(ctx, q, query, append([]any{r.Events, after, limit}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("reading the delivered rows of %s: %w", t.Outbox, err)
	}
	return rs, nil
}

// rowOfEvent reads the row of event $1, delivered by d, locked with lock.
func rowOfEvent(t Tables, d Delivery, lock bool) string {
	if t.Dialect == MySQL {
		query := `SELECT ` + mysqlRowColumns + ` FROM ` + MySQL.quote(t.Outbox) + ` o WHERE o.event_id = ?1`
		if lock {
			query += ` FOR UPDATE`
		}
		return query
	}
	query := `SELECT ` + rowColumns(d) + ` FROM ` + pgsql.QuoteIdent(t.Outbox) + ` o WHERE o.event_id = $1`
	if lock {
		query += ` FOR UPDATE OF o`
	}
	return query
}

// deliveredRows reads the rows of events $1 after id $2, at most $3, that
// r selects and d tells delivered; args are r's arguments, from $4 on.
func deliveredRows(t Tables, d Delivery, r DeliveredRange) (query string, args []any) {
	arg := func(v any) string { args = append(args, v); return "$" + strconv.Itoa(3+len(args)) }
	conds := []string{"o.event_name = ANY($1)", "o.id > $2", d.Delivered("o")}
	if !r.Since.IsZero() {
		conds = append(conds, "o.created_at >= "+arg(r.Since))
	}
	if !r.Until.IsZero() {
		conds = append(conds, "o.created_at < "+arg(r.Until))
	}
	if r.AggregateID != "" {
		conds = append(conds, "o.aggregate_id = "+arg(r.AggregateID))
	}
	return `SELECT ` + rowColumns(d) + ` FROM ` + pgsql.QuoteIdent(t.Outbox) + ` o WHERE ` +
		strings.Join(conds, " AND ") + ` ORDER BY o.id LIMIT $3`, args
}

// rowsDelete deletes outbox row $1.
var rowsDelete = define("rows/delete", func(t Tables) string {
	return `DELETE FROM ` + pgsql.QuoteIdent(t.Outbox) + ` WHERE id = $1`
})

// The row reads per shape: delivered by the stamping paths only, or by
// the WAL path too; locked or not; the delivered rows of every range.
var (
	_ = define("rows/of-event", func(t Tables) string { return rowOfEvent(t, Delivery{}, false) })
	_ = define("rows/of-event-wal-lock", func(t Tables) string {
		return rowOfEvent(t, Delivery{progress: t.WALProgress()}, true)
	})
	_ = define("rows/delivered", func(t Tables) string {
		q, _ := deliveredRows(t, Delivery{}, DeliveredRange{})
		return q
	})
	_ = define("rows/delivered-wal-filtered", func(t Tables) string {
		q, _ := deliveredRows(t, Delivery{progress: t.WALProgress()},
			DeliveredRange{Since: time.Unix(1, 0), Until: time.Unix(2, 0), AggregateID: "A"})
		return q
	})
)
