package outboxdb

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// DeadLetter is a row of the dead-letter table, as an operator's repairs
// read it.
type DeadLetter struct {
	ID int64
	// EventID is the event's id, also once the letter was retried (a
	// retry clears event_id, which consumers skip events by, and keeps the
	// id in retried_event_id); uuid.Nil when the message had none.
	EventID       uuid.UUID
	Source        string
	EventName     string
	EventVersion  int
	Topic         string
	AggregateType string
	AggregateID   string
	AggregateSeq  int64 // 0 when the row had none
	Payload       []byte
	Headers       []byte // as stored; not always a JSON object of strings
	Reason        string
	Attempts      int
	CreatedAt     time.Time
	RetriedAt     *time.Time
	DiscardedAt   *time.Time
	DiscardNote   string
}

// The states of a dead letter, as LetterFilter.State names them.
const (
	LetterOpen      = "open"      // neither retried nor discarded
	LetterRetried   = "retried"   // its event went back to the outbox
	LetterDiscarded = "discarded" // set aside for good
)

// letterState is the condition of each state; retry and discard each
// leave a letter of the other state alone, so they exclude each other.
var letterState = map[string]string{
	LetterOpen:      "retried_at IS NULL AND discarded_at IS NULL",
	LetterRetried:   "retried_at IS NOT NULL",
	LetterDiscarded: "retried_at IS NULL AND discarded_at IS NOT NULL",
}

// LetterFilter selects dead letters; its zero value selects all of them.
type LetterFilter struct {
	Source string    // "relay" or a consumer name; "" for any
	Event  string    // event name; "" for any
	Reason string    // a substring of the reason; "" for any
	Since  time.Time // dead-lettered at or after; zero for no bound
	Until  time.Time // dead-lettered before; zero for no bound
	State  string    // LetterOpen, LetterRetried or LetterDiscarded; "" for any
	Limit  int       // at most this many; 0 for all
}

// where is f's condition and its arguments, in dialect d.
func (f LetterFilter) where(d Dialect) (string, []any, error) {
	var (
		conds []string
		args  []any
	)
	mark := "$" // MySQL's forms number their parameters as SQLite's do (Bind)
	if d != Postgres {
		mark = "?"
	}
	arg := func(v any) string { args = append(args, v); return mark + strconv.Itoa(len(args)) }
	if f.Source != "" {
		conds = append(conds, "source = "+arg(f.Source))
	}
	if f.Event != "" {
		conds = append(conds, "event_name = "+arg(f.Event))
	}
	if f.Reason != "" {
		if d == MySQL {
			conds = append(conds, "LOCATE("+arg(f.Reason)+", reason) > 0")
		} else {
			conds = append(conds, "strpos(reason, "+arg(f.Reason)+") > 0")
		}
	}
	if !f.Since.IsZero() {
		conds = append(conds, "created_at >= "+arg(f.Since))
	}
	if !f.Until.IsZero() {
		conds = append(conds, "created_at < "+arg(f.Until))
	}
	if f.State != "" {
		c, ok := letterState[f.State]
		if !ok {
			return "", nil, fmt.Errorf("unknown dead-letter state %q (want open, retried or discarded)", f.State)
		}
		conds = append(conds, c)
	}
	if len(conds) == 0 {
		return "TRUE", args, nil
	}
	return strings.Join(conds, " AND "), args, nil
}

// letterColumns are the columns a DeadLetter is scanned from, in t's
// dialect (MySQL's JSON is text already).
func (t Tables) letterColumns() string {
	headers := "headers::text"
	if t.Dialect == MySQL {
		headers = "headers"
	}
	return `id, coalesce(retried_event_id, event_id), source, coalesce(event_name, ''),
	coalesce(event_version, 0), coalesce(topic, ''), coalesce(aggregate_type, ''), coalesce(aggregate_id, ''),
	coalesce(aggregate_seq, 0), payload, ` + headers + `, reason, attempts, created_at, retried_at, discarded_at,
	coalesce(discard_note, '')`
}

// readLetters runs a query of letterColumns and scans its rows.
func readLetters(ctx context.Context, q Querier, query string, args ...any) ([]DeadLetter, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []DeadLetter{}
	for rows.Next() {
		var (
			d       DeadLetter
			eventID uuid.NullUUID
			headers sql.NullString
		)
		if err := rows.Scan(&d.ID, &eventID, &d.Source, &d.EventName, &d.EventVersion, &d.Topic, &d.AggregateType,
			&d.AggregateID, &d.AggregateSeq, &d.Payload, &headers, &d.Reason, &d.Attempts, &d.CreatedAt,
			&d.RetriedAt, &d.DiscardedAt, &d.DiscardNote); err != nil {
			return nil, err
		}
		d.EventID = eventID.UUID
		if headers.Valid {
			d.Headers = []byte(headers.String)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// ReadDeadLetters reads the dead letters f selects, newest first: the
// primary key serves it, and the (source, created_at) index with a source.
func (t Tables) ReadDeadLetters(ctx context.Context, q Querier, f LetterFilter) ([]DeadLetter, error) {
	where, args, err := f.where(t.Dialect)
	if err != nil {
		return nil, err
	}
	ds, err := readLetters(ctx, t.bound(q), lettersList(t, where, f.Limit), args...)
	if err != nil {
		return nil, fmt.Errorf("reading the dead letters of %s: %w", t.DeadLetters, err)
	}
	return ds, nil
}

// ReadDeadLetterIDs lists the ids of the dead letters f selects, oldest
// first.
func (t Tables) ReadDeadLetterIDs(ctx context.Context, q Querier, f LetterFilter) ([]int64, error) {
	where, args, err := f.where(t.Dialect)
	if err != nil {
		return nil, err
	}
	rows, err := t.bound(q).QueryContext(ctx, lettersIDs(t, where, f.Limit), args...)
	if err != nil {
		return nil, fmt.Errorf("reading the dead letters of %s: %w", t.DeadLetters, err)
	}
	defer rows.Close()
	ids := []int64{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("reading the dead letters of %s: %w", t.DeadLetters, err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// lettersList reads the letters of condition where, newest first, at
// most limit (all when not positive).
func lettersList(t Tables, where string, limit int) string {
	return `SELECT ` + t.letterColumns() + ` FROM ` + t.Dialect.quote(t.DeadLetters) +
		` WHERE ` + where + ` ORDER BY id DESC` + limitClause(limit)
}

// lettersIDs reads the ids of the letters of condition where, oldest
// first, at most limit (all when not positive).
func lettersIDs(t Tables, where string, limit int) string {
	return `SELECT id FROM ` + t.Dialect.quote(t.DeadLetters) + ` WHERE ` + where +
		` ORDER BY id` + limitClause(limit)
}

// exampleFilter sets every field of a LetterFilter, for the filtered
// statements' golden files.
var exampleFilter = LetterFilter{Source: "relay", Event: "order.paid", Reason: "timeout", Since: time.Unix(1, 0),
	Until: time.Unix(2, 0), State: LetterOpen, Limit: 100}

// The listings, unfiltered and with every filter.
var (
	_ = onPostgresAndMySQL("letters/list", func(t Tables) string { return lettersList(t, "TRUE", 0) })
	_ = onPostgresAndMySQL("letters/list-filtered", func(t Tables) string {
		where, _, _ := exampleFilter.where(t.Dialect)
		return lettersList(t, where, exampleFilter.Limit)
	})
	_ = onPostgresAndMySQL("letters/ids", func(t Tables) string { return lettersIDs(t, "TRUE", 0) })
	_ = onPostgresAndMySQL("letters/ids-filtered", func(t Tables) string {
		where, _, _ := exampleFilter.where(t.Dialect)
		return lettersIDs(t, where, exampleFilter.Limit)
	})
)

// The statements on letters by id or event, and the repairs' marks.
var (
	// lettersLock reads and locks the letters of ids $1, in id order.
	lettersLock = define("letters/lock", func(t Tables) string {
		return `SELECT ` + t.letterColumns() + ` FROM ` + t.Dialect.quote(t.DeadLetters) +
			` WHERE id = ANY($1) ORDER BY id FOR UPDATE`
	})
	// lettersRead reads letter $1.
	lettersRead = define("letters/read", func(t Tables) string {
		return `SELECT ` + t.letterColumns() + ` FROM ` + t.Dialect.quote(t.DeadLetters) + ` WHERE id = $1`
	})
	// lettersOfEvent reads the letters of event $1, retried or not.
	lettersOfEvent = define("letters/of-event", func(t Tables) string {
		return `SELECT ` + t.letterColumns() + ` FROM ` + t.Dialect.quote(t.DeadLetters) +
			` WHERE event_id = $1 OR retried_event_id = $1 ORDER BY id`
	})
	// lettersMarkRetried marks letter $1 retried at $2.
	lettersMarkRetried = define("letters/mark-retried", func(t Tables) string {
		return `UPDATE ` + t.Dialect.quote(t.DeadLetters) + ` SET retried_at = $2,
		retried_event_id = event_id, event_id = NULL WHERE id = $1`
	})
	// lettersMarkDiscarded marks letter $1 discarded at $2 with note $3.
	lettersMarkDiscarded = define("letters/mark-discarded", func(t Tables) string {
		return `UPDATE ` + t.Dialect.quote(t.DeadLetters) + ` SET discarded_at = $2, discard_note = $3
		WHERE id = $1`
	})
	// The purge's deletes of settled letters (DeleteOlder).
	_ = define("letters/purge-retried", func(t Tables) string { return deleteOlder(t.DeadLetters, "retried_at") })
	_ = define("letters/purge-discarded", func(t Tables) string { return deleteOlder(t.DeadLetters, "discarded_at") })
)

func limitClause(n int) string {
	if n <= 0 {
		return ""
	}
	return " LIMIT " + strconv.Itoa(n)
}

// LockDeadLetters reads the dead letters ids, in id order, and locks them
// until the end of q's transaction (FOR UPDATE): a concurrent repair of
// the same letters waits, then reads what this one did. An id that does
// not exist is left out.
func (t Tables) LockDeadLetters(ctx context.Context, q Querier, ids ...int64) ([]DeadLetter, error) {
	var arg any = ids
	if t.Dialect == MySQL { // the ids as a JSON array (mysqlIDs)
		b, err := json.Marshal(ids)
		if err != nil {
			return nil, err
		}
		arg = string(b)
	}
	ds, err := readLetters(ctx, t.bound(q), lettersLock.SQL(t), arg)
	if err != nil {
		return nil, fmt.Errorf("locking dead letters of %s: %w", t.DeadLetters, err)
	}
	return ds, nil
}

// ReadDeadLetter reads the dead letter id; sql.ErrNoRows when there is
// none.
func (t Tables) ReadDeadLetter(ctx context.Context, q Querier, id int64) (DeadLetter, error) {
	ds, err := readLetters(ctx, t.bound(q), lettersRead.SQL(t), id)
	if err != nil {
		return DeadLetter{}, fmt.Errorf("reading dead letter %d of %s: %w", id, t.DeadLetters, err)
	}
	if len(ds) == 0 {
		return DeadLetter{}, sql.ErrNoRows
	}
	return ds[0], nil
}

// ReadLettersOfEvent reads the dead letters of event id, open or settled,
// in id order: by the event_id index, and retried ones by a scan of the
// dead letters (a small table).
func (t Tables) ReadLettersOfEvent(ctx context.Context, q Querier, id uuid.UUID) ([]DeadLetter, error) {
	ds, err := readLetters(ctx, t.bound(q), lettersOfEvent.SQL(t), id)
	if err != nil {
		return nil, fmt.Errorf("reading the dead letters of event %s: %w", id, err)
	}
	return ds, nil
}

// Execer is what a write takes: a *sql.DB, a *sql.Tx, or an ent client or
// transaction.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// MarkRetried marks the dead letter id retried at at. Its event id moves
// from event_id to retried_event_id: a consumer skips an event that has a
// dead letter of its own with the event's id in event_id, and a retried
// event must reach it again.
func (t Tables) MarkRetried(ctx context.Context, e Execer, id int64, at time.Time) error {
	_, err := t.boundExec(e).ExecContext(ctx, lettersMarkRetried.SQL(t), id, at)
	if err != nil {
		return fmt.Errorf("marking dead letter %d retried: %w", id, err)
	}
	return nil
}

// MarkDiscarded marks the dead letter id discarded at at, with note. Its
// event_id stays: its consumer keeps skipping the event.
func (t Tables) MarkDiscarded(ctx context.Context, e Execer, id int64, at time.Time, note string) error {
	_, err := t.boundExec(e).ExecContext(ctx, lettersMarkDiscarded.SQL(t), id, at, note)
	if err != nil {
		return fmt.Errorf("discarding dead letter %d: %w", id, err)
	}
	return nil
}

// PurgeSettled deletes the dead letters retried or discarded before
// cutoff, batch rows per statement (1000 when not positive), and returns
// how many. Open letters are never deleted.
func (t Tables) PurgeSettled(ctx context.Context, e Execer, cutoff time.Time, batch int) (int64, error) {
	var total int64
	for _, column := range []string{"retried_at", "discarded_at"} {
		n, err := t.DeleteOlder(ctx, e, t.DeadLetters, column, cutoff, batch)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}
