package outboxdb

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/internal/retention"
)

// Scheduled is the events of a scheduled events' table at one time of the
// database's clock: those waiting to be due and those cancelled, each
// counted up to a bound.
type Scheduled struct {
	At time.Time // the database's time of the read (clock_timestamp)
	// Exists tells the table exists; all else is zero when it does not.
	Exists bool
	// Waiting counts the events not cancelled, due or not; WaitingCapped
	// that it reached the bound.
	Waiting       int64
	WaitingCapped bool
	// NextDue is the earliest deliver_at of those waiting, zero for none.
	// Before At, the promoter has not moved it yet: it is overdue by
	// At - NextDue.
	NextDue time.Time
	// Overdue counts the waiting events due at At, up to the bound: the
	// promoter moves them within moments, so a count that stays above 0
	// tells it is stuck.
	Overdue       int64
	OverdueCapped bool
	// Cancelled counts the cancelled events, kept until retention removes
	// them.
	Cancelled       int64
	CancelledCapped bool
	// Topics splits the waiting events counted by topic, earliest due
	// first.
	Topics []TopicScheduled
}

// TopicScheduled is the waiting events of one topic, among those counted.
type TopicScheduled struct {
	Topic   string
	Waiting int64
	Overdue int64
	NextDue time.Time
}

// OverdueBy is how long the earliest waiting event has been due at s.At;
// 0 when none is due.
func (s Scheduled) OverdueBy() time.Duration {
	if s.NextDue.IsZero() || !s.NextDue.Before(s.At) {
		return 0
	}
	return s.At.Sub(s.NextDue)
}

// ReadScheduled counts the events of t's scheduled table, at most maxRows
// (DefaultMaxRows when not positive) of each kind, through its partial
// indexes: the waiting ones in (deliver_at, id) order, the cancelled ones
// by cancelled_at. No table is no event, not an error.
func ReadScheduled(ctx context.Context, q Querier, t Tables, maxRows int) (Scheduled, error) {
	if maxRows <= 0 {
		maxRows = DefaultMaxRows
	}
	s := Scheduled{Topics: []TopicScheduled{}}
	q = t.bound(q)
	if err := queryRow(ctx, q, scheduledNow.SQL(t), []any{t.catalogName(t.Scheduled)}, &s.At, &s.Exists); err != nil {
		return Scheduled{}, fmt.Errorf("reading the scheduled events: %w", err)
	}
	if !s.Exists {
		return s, nil
	}
	// The first maxRows waiting in due order hold every overdue one
	// unless more than maxRows are overdue: then Overdue is capped too.
	rows, err := q.QueryContext(ctx, scheduledWaiting.SQL(t), maxRows, s.At)
	if err != nil {
		return Scheduled{}, fmt.Errorf("reading the scheduled events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var ts TopicScheduled
		if err := rows.Scan(&ts.Topic, &ts.Waiting, &ts.Overdue, &ts.NextDue); err != nil {
			return Scheduled{}, fmt.Errorf("reading the scheduled events: %w", err)
		}
		s.Topics = append(s.Topics, ts)
		s.Waiting += ts.Waiting
		s.Overdue += ts.Overdue
		if s.NextDue.IsZero() || ts.NextDue.Before(s.NextDue) {
			s.NextDue = ts.NextDue
		}
	}
	if err := rows.Err(); err != nil {
		return Scheduled{}, fmt.Errorf("reading the scheduled events: %w", err)
	}
	s.WaitingCapped = s.Waiting >= int64(maxRows)
	s.OverdueCapped = s.Overdue >= int64(maxRows)
	if err := queryRow(ctx, q, scheduledCancelled.SQL(t), []any{maxRows}, &s.Cancelled); err != nil {
		return Scheduled{}, fmt.Errorf("counting the cancelled scheduled events: %w", err)
	}
	s.CancelledCapped = s.Cancelled >= int64(maxRows)
	return s, nil
}

// ScheduledRow is a row of the scheduled events' table: an event waiting
// to be due, or cancelled.
type ScheduledRow struct {
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
	DeliverAt     time.Time
	CreatedAt     time.Time
	CancelledAt   *time.Time
}

// ReadScheduledOfEvent reads the scheduled row of event id, by the unique
// index on event_id; sql.ErrNoRows when there is none (it was never
// scheduled, is in the outbox now, or the table does not exist).
func (t Tables) ReadScheduledOfEvent(ctx context.Context, q Querier, id uuid.UUID) (ScheduledRow, error) {
	q = t.bound(q)
	exists, err := t.TableExists(ctx, q, t.Scheduled)
	if err != nil {
		return ScheduledRow{}, err
	}
	if !exists {
		return ScheduledRow{}, sql.ErrNoRows
	}
	rows, err := q.QueryContext(ctx, scheduledOfEvent.SQL(t), id)
	if err != nil {
		return ScheduledRow{}, fmt.Errorf("reading the scheduled row of event %s: %w", id, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return ScheduledRow{}, fmt.Errorf("reading the scheduled row of event %s: %w", id, err)
		}
		return ScheduledRow{}, sql.ErrNoRows
	}
	var (
		r       ScheduledRow
		payload string
		headers sql.NullString
	)
	if err := rows.Scan(&r.ID, &r.EventID, &r.EventName, &r.EventVersion, &r.Topic, &r.AggregateType, &r.AggregateID,
		&payload, &headers, &r.ReadableFrom, &r.DeliverAt, &r.CreatedAt, &r.CancelledAt); err != nil {
		return ScheduledRow{}, fmt.Errorf("reading the scheduled row of event %s: %w", id, err)
	}
	r.Payload = []byte(payload)
	if headers.Valid && headers.String != "null" {
		r.Headers = []byte(headers.String)
	}
	return r, rows.Close()
}

// DeleteCancelled deletes the scheduled events cancelled before cutoff, in
// batches of batch rows (1000 when not positive), through the partial index
// on cancelled_at: a waiting event is never touched. No table deletes
// nothing.
func (t Tables) DeleteCancelled(ctx context.Context, db interface {
	Querier
	Execer
}, cutoff time.Time, batch int) (int64, error) {
	exists, err := t.TableExists(ctx, db, t.Scheduled)
	if err != nil || !exists {
		return 0, err
	}
	if batch <= 0 {
		batch = 1000
	}
	n, err := retention.InBatches(ctx, t.boundExec(db), scheduledDeleteCancelled.SQL(t), cutoff, batch)
	if err != nil {
		return n, fmt.Errorf("deleting the cancelled events of %s: %w", t.Scheduled, err)
	}
	return n, nil
}

var (
	// scheduledNow reads the database's clock and whether table $1 (the
	// scheduled table, quoted) exists.
	scheduledNow = define("scheduled/now", func(Tables) string {
		return `SELECT clock_timestamp(), to_regclass($1) IS NOT NULL`
	})
	// scheduledWaiting counts the first $1 waiting events in due order by
	// topic, those due at $2, and the earliest due.
	scheduledWaiting = define("scheduled/waiting", func(t Tables) string {
		return `SELECT topic, count(*), count(*) FILTER (WHERE deliver_at <= $2), min(deliver_at)
		FROM (SELECT topic, deliver_at FROM ` + pgsql.QuoteIdent(t.Scheduled) + `
			WHERE cancelled_at IS NULL ORDER BY deliver_at, id LIMIT $1) s
		GROUP BY topic ORDER BY min(deliver_at), topic`
	})
	// scheduledCancelled counts up to $1 cancelled events.
	scheduledCancelled = define("scheduled/cancelled", func(t Tables) string {
		return `SELECT count(*) FROM (SELECT 1 FROM ` + pgsql.QuoteIdent(t.Scheduled) + `
		WHERE cancelled_at IS NOT NULL LIMIT $1) c`
	})
	// scheduledOfEvent reads the scheduled row of event $1.
	scheduledOfEvent = define("scheduled/of-event", func(t Tables) string {
		return `SELECT id, event_id, event_name, event_version, topic, aggregate_type,
		aggregate_id, payload::text, headers::text, coalesce(readable_from, 0), deliver_at, created_at, cancelled_at
		FROM ` + pgsql.QuoteIdent(t.Scheduled) + ` WHERE event_id = $1`
	})
	// scheduledDeleteCancelled deletes up to $2 events cancelled before $1.
	scheduledDeleteCancelled = define("scheduled/delete-cancelled", func(t Tables) string {
		s := pgsql.QuoteIdent(t.Scheduled)
		return `DELETE FROM ` + s + ` WHERE id IN (SELECT id FROM ` + s + `
		WHERE cancelled_at < $1 ORDER BY cancelled_at LIMIT $2 FOR UPDATE SKIP LOCKED)`
	})
)
