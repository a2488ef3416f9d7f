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
	query := `SELECT ` + rowColumns(d) + ` FROM ` + pgsql.QuoteIdent(t.Outbox) + ` o WHERE o.event_id = $1`
	if lock {
		query += ` FOR UPDATE OF o`
	}
	rs, err := readRows(ctx, q, query, id)
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
	if _, err := e.ExecContext(ctx, `DELETE FROM `+pgsql.QuoteIdent(t.Outbox)+` WHERE id = $1`, id); err != nil {
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
	args := []any{r.Events, after, limit}
	arg := func(v any) string { args = append(args, v); return "$" + strconv.Itoa(len(args)) }
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
	rs, err := readRows(ctx, q, `SELECT `+rowColumns(d)+` FROM `+pgsql.QuoteIdent(t.Outbox)+` o WHERE `+
		strings.Join(conds, " AND ")+` ORDER BY o.id LIMIT $3`, args...)
	if err != nil {
		return nil, fmt.Errorf("reading the delivered rows of %s: %w", t.Outbox, err)
	}
	return rs, nil
}
