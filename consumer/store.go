package consumer

import (
	"context"
	stdsql "database/sql"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"entgo.io/ent/dialect"

	"github.com/entoutbox/entoutbox/events"
)

// ErrDuplicate is returned by a generated handler when the consumer has
// already processed the event: the delivery is acknowledged and skipped.
var ErrDuplicate = errors.New("consumer: event already processed by this consumer")

// DeadLetter is an event a consumer gave up on, with why.
type DeadLetter struct {
	Meta     events.Meta // as far as the message told it
	Payload  []byte
	Reason   string
	Attempts int

	// What the letter does to its aggregate's position (order.go).
	order letterOrder
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
