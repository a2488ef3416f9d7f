package consumer

// Dead letters: what a consumer gives up on is stored with why (and first
// published to a broker topic, when one is set), once per event and
// consumer, whatever the text it carries.

import (
	"context"
	stdsql "database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"unicode/utf8"

	"entgo.io/ent/dialect"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// insertDeadLetter is InsertDeadLetter, writing aggregate_seq too when
// withSeq (tables generated before it have no such column), and running
// first, in the same transaction, what the letter does to the positions.
func insertDeadLetter(ctx context.Context, db dialect.ExecQuerier, table string, withSeq bool, d DeadLetter,
	positions func(context.Context, dialect.ExecQuerier) error) error {
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
	columns, values := "", ""
	args := []any{eventID, d.Meta.Consumer, d.Meta.Name, d.Meta.Version, d.Meta.Topic, d.Meta.AggregateType,
		d.Meta.AggregateID, d.Payload, headers, d.Reason, d.Attempts}
	if withSeq {
		var seq any
		if d.Meta.AggregateSeq > 0 {
			seq = d.Meta.AggregateSeq
		}
		columns, values, args = ", aggregate_seq", ", $12::bigint", append(args, seq)
	}
	insert := func(ctx context.Context, db dialect.ExecQuerier) error {
		if positions != nil {
			if err := positions(ctx, db); err != nil {
				return err
			}
		}
		var res stdsql.Result
		t := pgsql.QuoteIdent(table)
		if err := db.Exec(ctx, `INSERT INTO `+t+` (event_id, source, event_name, event_version, topic,
		aggregate_type, aggregate_id, payload, headers, reason, attempts`+columns+`)
		SELECT $1::uuid, $2::text, $3::text, $4::bigint, $5::text, $6::text, $7::text, $8::bytea, $9::jsonb, $10::text, $11::bigint`+values+`
		WHERE $1::uuid IS NULL OR NOT EXISTS (SELECT 1 FROM `+t+` WHERE event_id = $1::uuid AND source = $2::text)`,
			args, &res); err != nil {
			return err
		}
		if d.written != nil {
			n, err := res.RowsAffected()
			*d.written = err != nil || n > 0 // unknown counts as written, as before
		}
		return nil
	}
	var err error
	if drv, ok := db.(dialect.Driver); ok && eventID != nil {
		err = insertLocked(ctx, drv, table+"/"+d.Meta.Consumer+"/"+d.Meta.EventID.String(), insert)
	} else {
		err = insert(ctx, db)
	}
	if err != nil {
		return fmt.Errorf("consumer: writing dead letter of event %s for consumer %q to %s: %w", d.Meta.EventID, d.Meta.Consumer, table, err)
	}
	return nil
}

// DeadLetter is an event a consumer gave up on, with why.
type DeadLetter struct {
	Meta     events.Meta // as far as the message told it
	Payload  []byte
	Reason   string
	Attempts int

	// What the letter does to its aggregate's position (order.go).
	order letterOrder
	// written, when set, is told whether a row was written: false when the
	// event had a letter of this consumer already (giveUp then logs and
	// counts nothing).
	written *bool
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

// giveUp stores the delivery as a dead letter and acknowledges it; if the
// dead letter cannot be stored the delivery is nacked so nothing is lost.
// The broker topic comes first: once the row exists a redelivery is
// skipped, so a topic publish that failed after it would never be made.
// It logs the dead letter once it is stored (a failure is the nack's to
// report), at error level: DeadLetteredLog; an event that has a letter of
// this consumer already (set aside before, and come again) writes none,
// and is neither logged nor counted again (written is false). A letter passed over waits,
// like the event would (turn), until it is its aggregate's next.
func (s *Set) giveUp(ctx context.Context, turn *gapWait, m events.Meta, topic string, msg *message.Message, reason string, attempts int,
	order letterOrder) (written bool, err error) {
	written = true // a store that does not tell (a callback of its own) counts as written
	d := DeadLetter{Meta: m, Payload: msg.Payload, Reason: reason, Attempts: attempts, order: order, written: &written}
	if s.cfg.DeadLetterPublisher != nil {
		out := message.NewMessage(msg.UUID, msg.Payload)
		out.Metadata = maps.Clone(msg.Metadata)
		out.Metadata.Set(MetaDeadLetterReason, reason)
		out.Metadata.Set(MetaDeadLetterConsumer, m.Consumer)
		out.Metadata.Set(MetaDeadLetterAttempts, strconv.Itoa(attempts))
		if err := s.cfg.DeadLetterPublisher.Publish(s.cfg.DeadLetterTopic, out); err != nil {
			return false, fmt.Errorf("consumer: publishing dead letter %s to %s: %w", msg.UUID, s.cfg.DeadLetterTopic, err)
		}
	}
	for {
		err := s.deadLetter(ctx, d)
		var gap *OutOfOrderError
		if !errors.As(err, &gap) {
			if err != nil {
				return false, err
			}
			break
		}
		if err := s.waitTurn(ctx, turn, m, gap); err != nil {
			var missing *missingError
			if !errors.As(err, &missing) {
				return false, err
			}
			d.order, d.Reason = letterForMissing, missing.Error()+"; then: "+d.Reason
		}
	}
	if !written {
		return false, nil // set aside before: that letter was logged and counted
	}
	s.cfg.Logger.Error(DeadLetteredLog, errors.New(d.Reason), watermill.LogFields{
		"event_id": msg.UUID, "consumer": m.Consumer, "topic": topic, "event_name": m.Name,
		"event_version": m.Version, "aggregate_type": m.AggregateType, "aggregate_id": m.AggregateID,
		"attempts": attempts})
	return true, nil
}

// DeadLetteredLog is the message a handler set logs, at error level, for
// each delivery it sent to the dead letters, with the reason as the error
// and the fields event_id, consumer, topic (as subscribed, else the
// event's declared topic with the prefix), event_name, event_version,
// aggregate_type, aggregate_id and attempts.
const DeadLetteredLog = "Event sent to the dead letters"

// Metadata set on dead letters published to a broker topic.
const (
	MetaDeadLetterReason   = events.ReservedPrefix + "dead_letter_reason"
	MetaDeadLetterConsumer = events.ReservedPrefix + "dead_letter_consumer"
	MetaDeadLetterAttempts = events.ReservedPrefix + "dead_letter_attempts"
)
