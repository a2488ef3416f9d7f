// Package letters writes what a consumer gives up on into its dead-letter
// table: once per event and consumer, whatever the text it carries, in a
// transaction that first applies what the letter does to the aggregate's
// position.
package letters

import (
	"context"
	stdsql "database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"entgo.io/ent/dialect"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/consumer/internal/ordering"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// Letter is a row of a dead-letter table.
type Letter struct {
	Meta     events.Meta // as far as the message told it
	Payload  []byte
	Reason   string
	Attempts int
}

// Insert writes l into table, with its aggregate_seq when withSeq (tables
// generated before it have no such column), running first, in the same
// transaction, positions (nil for none). It reports whether a row was
// written: false when the event had a letter of this consumer already.
// Where db can begin transactions, the write holds an advisory lock on the
// event and consumer, so that two deliveries of one event giving up at the
// same instant (a broker redelivering a message still being handled) write
// one letter. No unique index does it instead, because tables written by
// earlier versions may hold duplicates, which would fail its creation.
func Insert(ctx context.Context, db dialect.ExecQuerier, table string, withSeq bool, l Letter,
	positions func(context.Context, dialect.ExecQuerier) error) (written bool, err error) {
	l = storable(l)
	args, err := insertArgs(l, withSeq)
	if err != nil {
		return false, err
	}
	dialectOf := outboxdb.DialectFrom(db)
	query := outboxdb.Tables{DeadLetters: table, Dialect: dialectOf}.ConsumerLetterInsert(withSeq)
	insert := func(ctx context.Context, db dialect.ExecQuerier) error {
		if positions != nil {
			if err := positions(ctx, db); err != nil {
				return err
			}
		}
		var res stdsql.Result
		if err := outboxdb.Bound(db, dialectOf).Exec(ctx, query, args, &res); err != nil {
			return err
		}
		n, err := res.RowsAffected()
		written = err != nil || n > 0 // unknown counts as written
		return nil
	}
	pg := dialectOf == outboxdb.Postgres
	if drv, ok := db.(dialect.Driver); ok && l.Meta.EventID != uuid.Nil && pg {
		err = insertLocked(ctx, drv, table+"/"+l.Meta.Consumer+"/"+l.Meta.EventID.String(), insert)
	} else if ok && !pg {
		// SQLite's writers take turns: the transaction alone. On MySQL,
		// two letters of one event at once lock the same gap of the
		// event_id index: one of them deadlocks, and is written again
		// (its delivery is nacked, and finds the other's letter when it comes
		// again).
		err = ordering.InTx(ctx, drv, func(ctx context.Context, tx dialect.ExecQuerier) error { return insert(ctx, tx) })
	} else {
		err = insert(ctx, db)
	}
	if err != nil {
		return false, fmt.Errorf("consumer: writing dead letter of event %s for consumer %q to %s: %w", l.Meta.EventID, l.Meta.Consumer, table, err)
	}
	return written, nil
}

// insertArgs returns the insert's arguments, aggregate_seq's last when
// withSeq.
func insertArgs(l Letter, withSeq bool) (args []any, err error) {
	var eventID any
	if l.Meta.EventID != uuid.Nil {
		eventID = l.Meta.EventID
	}
	var headers any
	if len(l.Meta.Headers) > 0 {
		b, err := json.Marshal(l.Meta.Headers)
		if err != nil {
			return nil, err
		}
		headers = string(b)
	}
	args = []any{eventID, l.Meta.Consumer, l.Meta.Name, l.Meta.Version, l.Meta.Topic, l.Meta.AggregateType,
		l.Meta.AggregateID, l.Payload, headers, l.Reason, l.Attempts}
	if withSeq {
		var seq any
		if l.Meta.AggregateSeq > 0 {
			seq = l.Meta.AggregateSeq
		}
		args = append(args, seq)
	}
	return args, nil
}

// insertLocked runs insert in a transaction holding an advisory lock on key.
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

// storable returns l with every text PostgreSQL cannot hold escaped, and
// the reason saying which. A message any producer can send must never
// make its own dead letter unwritable (it would be nacked for ever).
func storable(l Letter) Letter {
	var escaped []string
	text := func(name string, s *string) {
		var ok bool
		if *s, ok = pgText(*s); !ok {
			escaped = append(escaped, name)
		}
	}
	m := &l.Meta
	text("consumer", &m.Consumer)
	text("event_name", &m.Name)
	text("topic", &m.Topic)
	text("aggregate_type", &m.AggregateType)
	text("aggregate_id", &m.AggregateID)
	if len(m.Headers) > 0 {
		headers := make(map[string]string, len(m.Headers))
		keys := make([]string, 0, len(m.Headers))
		for k := range m.Headers {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			ek, kok := pgText(k)
			ev, vok := pgText(m.Headers[k])
			if !kok || !vok {
				escaped = append(escaped, `header "`+ek+`"`)
			}
			headers[ek] = ev
		}
		m.Headers = headers
	}
	text("reason", &l.Reason)
	if len(escaped) > 0 {
		l.Reason += "; stored escaped" + escapedNote + ": " + strings.Join(escaped, ", ")
	}
	return l
}
