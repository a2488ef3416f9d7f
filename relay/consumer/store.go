package consumer

import (
	"context"
	stdsql "database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"entgo.io/ent/dialect"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// ErrDuplicate is returned by a generated handler when the consumer has
// already processed the event: the delivery is acknowledged and skipped.
var ErrDuplicate = errors.New("entoutbox: event already processed by this consumer")

// RecordProcessed inserts (consumer, event id) into the processed-events
// table through the handler's transaction. It returns false, without
// error, when the pair is already there: the event was handled before. A
// concurrent delivery of the same event waits on the unique index until
// the first transaction ends, so only one of them proceeds.
func RecordProcessed(ctx context.Context, tx dialect.ExecQuerier, table string, m events.Meta) (bool, error) {
	var res stdsql.Result
	err := tx.Exec(ctx, `INSERT INTO `+pgsql.QuoteIdent(table)+` (consumer, event_id, event_name, attempts)
		VALUES ($1, $2, $3, $4) ON CONFLICT (consumer, event_id) DO NOTHING`,
		[]any{m.Consumer, m.EventID, m.Name, max(m.Attempt, 1)}, &res)
	if err != nil {
		return false, fmt.Errorf("entoutbox: recording event %s as processed by %q: %w", m.EventID, m.Consumer, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// Tables names the tables of a generated handler set.
type Tables struct {
	Processed   string // the processed-events (dedupe) table
	DeadLetters string // the dead-letter table
}

// RecordDelivery is RecordProcessed that also returns false when this
// consumer already set the event aside as a dead letter: a redelivered
// poison event is acknowledged without running its attempts again. One
// statement, so a delivery costs no extra round trip; the dead-letter
// check is an index lookup on event_id.
func RecordDelivery(ctx context.Context, tx dialect.ExecQuerier, t Tables, m events.Meta) (bool, error) {
	var res stdsql.Result
	err := tx.Exec(ctx, `INSERT INTO `+pgsql.QuoteIdent(t.Processed)+` (consumer, event_id, event_name, attempts)
		SELECT $1::text, $2::uuid, $3::text, $4::bigint
		WHERE NOT EXISTS (SELECT 1 FROM `+pgsql.QuoteIdent(t.DeadLetters)+` WHERE event_id = $2::uuid AND source = $1::text)
		ON CONFLICT (consumer, event_id) DO NOTHING`,
		[]any{m.Consumer, m.EventID, m.Name, max(m.Attempt, 1)}, &res)
	if err != nil {
		return false, fmt.Errorf("entoutbox: recording event %s as processed by %q: %w", m.EventID, m.Consumer, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// InvalidPayload is the error of a payload that decoded but does not
// validate as the latest version; it says whether it was upcast first.
func InvalidPayload(version, latest int, err error) error {
	if version == latest {
		return err // it names the event and version already
	}
	return fmt.Errorf("version %d payload upcast to version %d: %w", version, latest, err)
}

// DeadLetter is an event a consumer gave up on, with why.
type DeadLetter struct {
	Meta     events.Meta // as far as the message told it
	Payload  []byte
	Reason   string
	Attempts int
}

// escapedNote ends the reason of a dead letter some of whose text had to
// be escaped, so that a reader knows how to get the original bytes back.
const escapedNote = ` (NUL and bytes that are not UTF-8 as \xNN, backslash as \\)`

// pgText returns s as PostgreSQL text and jsonb can hold it: unchanged
// when it is valid UTF-8 without NUL (ok), else escaped as escapedNote
// says, which keeps every original byte.
func pgText(s string) (_ string, ok bool) {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1, r == 0:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String(), false
}

// storable returns d with every text PostgreSQL cannot hold escaped, and
// the reason saying which. A message any producer can send must never
// make its own dead letter unwritable (it would be nacked for ever).
func storable(d DeadLetter) DeadLetter {
	var escaped []string
	text := func(name string, s *string) {
		var ok bool
		if *s, ok = pgText(*s); !ok {
			escaped = append(escaped, name)
		}
	}
	m := &d.Meta
	text("consumer", &m.Consumer)
	text("event_name", &m.Name)
	text("topic", &m.Topic)
	text("aggregate_type", &m.AggregateType)
	text("aggregate_id", &m.AggregateID)
	if len(m.Headers) > 0 {
		headers := make(map[string]string, len(m.Headers))
		for _, k := range sortedKeys(m.Headers) {
			v := m.Headers[k]
			ek, kok := pgText(k)
			ev, vok := pgText(v)
			if !kok || !vok {
				escaped = append(escaped, `header "`+ek+`"`)
			}
			headers[ek] = ev
		}
		m.Headers = headers
	}
	text("reason", &d.Reason)
	if len(escaped) > 0 {
		d.Reason += "; stored escaped" + escapedNote + ": " + strings.Join(escaped, ", ")
	}
	return d
}

// InsertDeadLetter writes d into the dead-letter table, unless this
// consumer already set the same event aside: a delivery nacked after its
// dead letter was stored (the ack was lost) comes again and must not be
// stored twice. Text PostgreSQL cannot hold (NUL, bytes that are not
// UTF-8) is stored escaped, and the reason says so; the payload is bytea
// and kept as received.
func InsertDeadLetter(ctx context.Context, db dialect.ExecQuerier, table string, d DeadLetter) error {
	d = storable(d)
	var eventID any
	if d.Meta.EventID != uuid.Nil {
		eventID = d.Meta.EventID
	}
	var headers any
	if len(d.Meta.Headers) > 0 {
		b, err := json.Marshal(d.Meta.Headers)
		if err != nil {
			return err
		}
		headers = string(b)
	}
	insert := func(ctx context.Context, db dialect.ExecQuerier) error {
		var res stdsql.Result
		t := pgsql.QuoteIdent(table)
		return db.Exec(ctx, `INSERT INTO `+t+` (event_id, source, event_name, event_version, topic,
		aggregate_type, aggregate_id, payload, headers, reason, attempts)
		SELECT $1::uuid, $2::text, $3::text, $4::bigint, $5::text, $6::text, $7::text, $8::bytea, $9::jsonb, $10::text, $11::bigint
		WHERE $1::uuid IS NULL OR NOT EXISTS (SELECT 1 FROM `+t+` WHERE event_id = $1::uuid AND source = $2::text)`,
			[]any{eventID, d.Meta.Consumer, d.Meta.Name, d.Meta.Version, d.Meta.Topic, d.Meta.AggregateType,
				d.Meta.AggregateID, d.Payload, headers, d.Reason, d.Attempts}, &res)
	}
	var err error
	if drv, ok := db.(dialect.Driver); ok && eventID != nil {
		err = insertLocked(ctx, drv, table+"/"+d.Meta.Consumer+"/"+d.Meta.EventID.String(), insert)
	} else {
		err = insert(ctx, db)
	}
	if err != nil {
		return fmt.Errorf("entoutbox: writing dead letter of event %s for consumer %q to %s: %w", d.Meta.EventID, d.Meta.Consumer, table, err)
	}
	return nil
}

// insertLocked runs insert in a transaction holding an advisory lock on
// key: two deliveries of one event giving up at the same instant (a
// broker redelivering a message still being handled) then write one dead
// letter, the second seeing the first's row. No unique index does it
// instead, because tables written by earlier versions may hold duplicates,
// which would fail its creation.
func insertLocked(ctx context.Context, drv dialect.Driver, key string, insert func(context.Context, dialect.ExecQuerier) error) error {
	tx, err := drv.Tx(ctx)
	if err != nil {
		return err
	}
	var res stdsql.Result
	if err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1::text, 0))`, []any{key}, &res); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := insert(ctx, tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
