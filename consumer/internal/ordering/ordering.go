// Package ordering is the consumers' rule of order: each consumer name
// applies an aggregate's events in the order they were written, whatever
// the broker delivers to whichever instance. Its statements are
// internal/outboxdb's; the consumer package decides when to run them.
package ordering

// The ordering check: each consumer name applies an aggregate's events in
// the order they were written, whatever the broker delivers to whichever
// instance. Emit numbers the events of each aggregate on its topic (the
// message's outbox_aggregate_seq, events.Meta.AggregateSeq: 1, 2, 3...);
// the consumer keeps, per aggregate, the last one it applied
// (schema.ConsumerPosition) and checks it in the handler's transaction,
// under the position row's lock, with the dedupe record:
//
//   - seq <= last: applied before, a duplicate (acknowledged);
//   - seq == last+1: applied, and the position moves to it, in the same
//     commit as the effect;
//   - seq > last+1: its predecessor has not been applied yet: an
//     *OutOfOrderError, and Handle waits for it (see wait.go);
//   - the aggregate is held behind a dead letter and seq is after the held
//     one: a *HeldError, and Handle sets the event aside too.
//
// An aggregate is held when one of its events goes to the dead letters
// (unless WithPassOverDeadLetters), and released when that event comes
// back (`entoutbox dead-letters retry`) and is applied, or when its letter
// is discarded: a discarded event is skipped, the position moving past it
// (internal/outboxdb's SettleQuery, which `dead-letters discard` and
// `retry` run too); the aggregate is then held at its next event if that
// one is in the dead letters too (set aside behind it), and goes on
// otherwise.

import (
	"context"
	stdsql "database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// OutOfOrderError is what the handler's transaction returns for an event
// that comes before its consumer applied its predecessor: it is not a
// handler failure, and Handle waits for the predecessor (a gap).
type OutOfOrderError struct {
	Consumer                          string
	Topic, AggregateType, AggregateID string
	Want, Got                         int64 // the next seq the consumer applies, and this event's
	// Waited is how long an event of the aggregate has waited for Want,
	// across deliveries and instances; zero when none had yet.
	Waited time.Duration

	// Mark is the lowest waiting seq marked on the position, for the
	// handler set's wake-ups; 0 for none, or not read.
	Mark int64
}

func (e *OutOfOrderError) Error() string {
	return fmt.Sprintf("consumer: %q: event seq %d of aggregate %s/%s on %q came before seq %d",
		e.Consumer, e.Got, e.AggregateType, e.AggregateID, e.Topic, e.Want)
}

// HeldError is what the handler's transaction returns for an event of an
// aggregate held behind a dead letter: Handle sets it aside at once, with
// this error as its reason, so that it waits for the repair in the dead
// letters rather than in the broker.
type HeldError struct {
	AggregateType, AggregateID string
	Seq                        int64     // this event's
	HeldSeq                    int64     // the held event's
	HeldEventID                uuid.UUID // uuid.Nil when the held seq never arrived
}

func (e *HeldError) Error() string {
	if e.HeldEventID == uuid.Nil {
		return fmt.Sprintf("held: seq %d of aggregate %s/%s never arrived; this event (seq %d) waits for its repair "+
			"(retry the relay's dead letter of seq %d, then this one: `entoutbox dead-letters retry`)",
			e.HeldSeq, e.AggregateType, e.AggregateID, e.Seq, e.HeldSeq)
	}
	return fmt.Sprintf("held: event %s (seq %d) of aggregate %s/%s is in the dead letters; this event (seq %d) waits for its repair "+
		"(retry that letter, then this one: `entoutbox dead-letters retry`)",
		e.HeldEventID, e.HeldSeq, e.AggregateType, e.AggregateID, e.Seq)
}

// ErrSettle is what the handler's transaction returns when the event the
// aggregate waits for (the held one, or the next of a gap) has a
// discarded dead letter: Handle settles the position in a transaction of
// its own (Settle) and tries the event again.
var ErrSettle = errors.New("consumer: the aggregate's next event was discarded from the dead letters")

// ErrLetteredNext is the aggregate's next event when this consumer set it
// aside without moving the position (a letter stored before positions
// were kept): Handle applies the dead-letter policy to the position now,
// and acknowledges the delivery.
var ErrLetteredNext = errors.New("consumer: the aggregate's next event is in this consumer's dead letters")

// Ordered reports whether m's consumer puts m in its aggregate's order.
func Ordered(t Tables, m events.Meta) bool { return t.Positions != "" && m.AggregateSeq > 0 }

// position is a consumer's row for one aggregate, read under its lock.
type position struct {
	id        int64
	last      int64
	held      stdsql.NullInt64
	heldEvent uuid.NullUUID
	waited    stdsql.NullFloat64 // seconds since waiting_since, by the database's clock
	lettered  bool               // this consumer has a dead letter of the event (open or discarded)
	// skipped: the event the aggregate waits for (held, or the next of a
	// gap before m) was discarded from the dead letters (Settle moves past it).
	skipped bool
}

// lockPosition reads m's aggregate's position for its consumer, making the
// row (at 0) if there is none, and holds its lock until tx ends: a second
// delivery of the aggregate, on any instance, waits here.
func lockPosition(ctx context.Context, tx dialect.ExecQuerier, t Tables, m events.Meta) (position, error) {
	var p position
	// Made first, then read: SQLite's transaction holds the write lock
	// already; MySQL's upsert locks the row, made or found.
	if t.serial() {
		var res stdsql.Result
		if err := tx.Exec(ctx, t.DB().LockPositionCreateQuery(), []any{m.Consumer, m.Topic, m.AggregateType, m.AggregateID}, &res); err != nil {
			return p, err
		}
	}
	var rows entsql.Rows
	err := tx.Query(ctx, t.DB().LockPositionQuery(),
		[]any{m.Consumer, m.Topic, m.AggregateType, m.AggregateID, m.EventID, m.AggregateSeq}, &rows)
	if err != nil {
		return p, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return p, err
		}
		return p, errors.New("no position row returned")
	}
	if err := rows.Scan(&p.id, &p.last, &p.held, &p.heldEvent, &p.waited, &p.lettered, &p.skipped); err != nil {
		return p, err
	}
	return p, rows.Close()
}

// Record is RecordDelivery for an event with a seq: it returns true
// when the event is the aggregate's next (or a retried dead letter of this
// consumer) and records it, false for a duplicate, and an
// *OutOfOrderError or *HeldError for an event that must not be applied
// now.
func Record(ctx context.Context, tx dialect.ExecQuerier, t Tables, m events.Meta) (bool, error) {
	tx = On(t, tx)
	next, fresh, err := recordNext(ctx, tx, t, m)
	if err != nil || next {
		return fresh, err
	}
	p, err := lockPosition(ctx, tx, t, m)
	if err != nil {
		return false, fmt.Errorf("consumer: reading the position of %q on aggregate %s/%s: %w", m.Consumer, m.AggregateType, m.AggregateID, err)
	}
	s := m.AggregateSeq
	if p.skipped && s > p.last {
		return false, ErrSettle // the event it waits for was discarded: skipped
	}
	switch {
	case p.held.Valid && s == p.held.Int64:
		if p.lettered {
			return false, nil // the held event's letter is still open: a redelivery of it
		}
		if s != p.last+1 {
			return false, outOfOrder(m, p) // retried before its own gap was filled
		}
		return apply(ctx, tx, t, m, p)
	case s <= p.last:
		if p.lettered {
			return false, nil
		}
		// Applied or passed over before. A letter of this consumer's that
		// an operator retried is applied again, out of order (the position
		// went past it when it was passed over); anything else is a
		// duplicate.
		return recordRetried(ctx, tx, t, m)
	case p.held.Valid && s > p.held.Int64:
		var id uuid.UUID
		if p.heldEvent.Valid {
			id = p.heldEvent.UUID
		}
		return false, &HeldError{AggregateType: m.AggregateType, AggregateID: m.AggregateID, Seq: s, HeldSeq: p.held.Int64, HeldEventID: id}
	case s == p.last+1:
		if p.lettered {
			return false, ErrLetteredNext
		}
		return apply(ctx, tx, t, m, p)
	default:
		return false, outOfOrder(m, p)
	}
}

// recordNext is the common case of Record: m is its aggregate's
// next event, the aggregate is not held, and m is not in this consumer's
// dead letters. It records m as a run of one (outboxdb's RecordRunQuery,
// the statement of a batch): next is true when the position moved to m,
// and fresh false when m's dedupe record was there already (the positions
// were cleared, not the records: the caller rolls back the move). In
// every other case it changes nothing and next is false: the caller takes
// the full path (lockPosition).
func recordNext(ctx context.Context, tx dialect.ExecQuerier, t Tables, m events.Meta) (next, fresh bool, err error) {
	if t.serial() { // the run statement takes arrays
		return recordNextSerial(ctx, tx, t, m)
	}
	args := []any{[]string{m.Consumer}, []int32{0}, []string{m.Topic}, []string{m.AggregateType}, []string{m.AggregateID},
		[]int64{m.AggregateSeq}, []uuid.UUID{m.EventID}, []string{m.Name}, []bool{true}, []int64{int64(max(m.Attempt, 1))}}
	var rows entsql.Rows
	if err = tx.Query(ctx, t.DB().RecordRunQuery(), args, &rows); err != nil {
		return false, false, fmt.Errorf("consumer: recording event %s as processed by %q: %w", m.EventID, m.Consumer, err)
	}
	defer rows.Close()
	if rows.Next() {
		var i int32
		if err := rows.Scan(&i, &next, &fresh); err != nil {
			return false, false, err
		}
	}
	return next, fresh, rows.Close()
}

// recordNextSerial is recordNext on MySQL and SQLite, in two statements
// under a savepoint: the position moved when m is its next and it is not held (a
// lock on its row alone), then m recorded unless it is a duplicate or in
// this consumer's dead letters. In any other case the savepoint is rolled
// back and the full path decides. The first event of an aggregate takes
// the full path at once: its position is likely not there, and on MySQL a
// locking statement on a missing key would lock the gap where it would be. No
// plain read comes before the lock: the transaction's snapshot, which the
// handler's reads see, is taken after it, with the previous event's
// effect committed.
func recordNextSerial(ctx context.Context, tx dialect.ExecQuerier, t Tables, m events.Meta) (next, fresh bool, err error) {
	if m.AggregateSeq < 2 {
		return false, false, nil
	}
	var res stdsql.Result
	if err := tx.Exec(ctx, `SAVEPOINT entoutbox_next`, []any{}, &res); err != nil {
		return false, false, err
	}
	key := []any{m.Consumer, m.Topic, m.AggregateType, m.AggregateID, m.AggregateSeq}
	if err := tx.Exec(ctx, t.DB().MoveNextQuery(), key, &res); err != nil {
		return false, false, fmt.Errorf("consumer: moving the position of %q to event %s: %w", m.Consumer, m.EventID, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return false, false, err
	}
	err = tx.Exec(ctx, t.DB().RecordDeliveryQuery(), []any{m.Consumer, m.EventID, m.Name, max(m.Attempt, 1)}, &res)
	if err != nil {
		return false, false, fmt.Errorf("consumer: recording event %s as processed by %q: %w", m.EventID, m.Consumer, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 1 {
		return err == nil, err == nil, err
	}
	// A duplicate, or a letter of this consumer's: the full path tells.
	if err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT entoutbox_next`, []any{}, &res); err != nil {
		return false, false, err
	}
	return false, false, nil
}

func outOfOrder(m events.Meta, p position) *OutOfOrderError {
	e := &OutOfOrderError{Consumer: m.Consumer, Topic: m.Topic, AggregateType: m.AggregateType, AggregateID: m.AggregateID,
		Want: p.last + 1, Got: m.AggregateSeq}
	if p.waited.Valid {
		e.Waited = time.Duration(math.Max(p.waited.Float64, 0) * float64(time.Second))
	}
	return e
}

// apply records m as processed and moves the position to it, releasing
// the aggregate when m is the held event, in one statement. An existing
// dedupe record (the positions were cleared, not the records) makes it a
// duplicate, and the caller's rollback leaves the position where it was.
func apply(ctx context.Context, tx dialect.ExecQuerier, t Tables, m events.Meta, p position) (bool, error) {
	fresh, err := applyRecord(ctx, tx, t, m, p)
	if err != nil || !fresh || !p.held.Valid || p.held.Int64 != m.AggregateSeq {
		return fresh, err
	}
	// The held event, applied, released the aggregate: the events set
	// aside behind it hold it at the next one, or were discarded (skipped).
	_, err = Settle(ctx, tx, t, m)
	return true, err
}

// applyRecord records m and moves position p to it: ApplyQuery, or on
// SQLite its two statements.
func applyRecord(ctx context.Context, tx dialect.ExecQuerier, t Tables, m events.Meta, p position) (bool, error) {
	if !t.serial() {
		var rows entsql.Rows
		err := tx.Query(ctx, t.DB().ApplyQuery(),
			[]any{m.Consumer, m.EventID, m.Name, max(m.Attempt, 1), m.AggregateSeq, p.id}, &rows)
		if err != nil {
			return false, fmt.Errorf("consumer: recording event %s as processed by %q: %w", m.EventID, m.Consumer, err)
		}
		return ScanBool(&rows)
	}
	var res stdsql.Result
	if err := tx.Exec(ctx, t.DB().RecordProcessedQuery(), []any{m.Consumer, m.EventID, m.Name, max(m.Attempt, 1)}, &res); err != nil {
		return false, fmt.Errorf("consumer: recording event %s as processed by %q: %w", m.EventID, m.Consumer, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	if err := moveTo(ctx, tx, t, p, m.AggregateSeq); err != nil {
		return false, fmt.Errorf("consumer: moving the position of %q to event %s: %w", m.Consumer, m.EventID, err)
	}
	return n == 1, nil
}

// SettleAlone settles m's aggregate's position in a transaction of its
// own, making the row when there is none (lockPosition), and tells
// whether the position changed.
func SettleAlone(ctx context.Context, db dialect.ExecQuerier, t Tables, m events.Meta) (changed bool, err error) {
	err = InTx(ctx, db, func(ctx context.Context, tx dialect.ExecQuerier) error {
		tx = On(t, tx)
		if _, err := lockPosition(ctx, tx, t, m); err != nil {
			return fmt.Errorf("consumer: reading the position of %q on aggregate %s/%s: %w", m.Consumer, m.AggregateType, m.AggregateID, err)
		}
		changed, err = Settle(ctx, tx, t, m)
		return err
	})
	return changed, err
}

// Settle runs internal/outboxdb's SettleQuery on m's aggregate in tx, and
// tells whether the position changed.
func Settle(ctx context.Context, tx dialect.ExecQuerier, t Tables, m events.Meta) (changed bool, err error) {
	tx = On(t, tx)
	if t.serial() {
		return settleSteps(ctx, tx, t, m)
	}
	q := outboxdb.Tables{Positions: t.Positions, DeadLetters: t.DeadLetters}.SettleQuery()
	var rows entsql.Rows
	if err := tx.Query(ctx, q, []any{m.Consumer, m.Topic, m.AggregateType, m.AggregateID}, &rows); err != nil {
		return false, fmt.Errorf("consumer: settling the position of %q on aggregate %s/%s: %w", m.Consumer, m.AggregateType, m.AggregateID, err)
	}
	defer rows.Close()
	var last, held int64
	if rows.Next() {
		if err := rows.Scan(&last, &held, &changed); err != nil {
			return false, err
		}
	}
	if err := rows.Close(); err != nil {
		return false, fmt.Errorf("consumer: settling the position of %q on aggregate %s/%s: %w", m.Consumer, m.AggregateType, m.AggregateID, err)
	}
	return changed, nil
}

// settleSteps is Settle on SQLite and MySQL, whose position tx locked
// already (lockPosition): outboxdb's SettleSteps.
func settleSteps(ctx context.Context, tx dialect.ExecQuerier, t Tables, m events.Meta) (bool, error) {
	s, err := t.DB().SettleSteps(ctx, tx, m.Consumer, m.Topic, m.AggregateType, m.AggregateID)
	if err != nil {
		return false, fmt.Errorf("consumer: settling the position of %q on aggregate %s/%s: %w", m.Consumer, m.AggregateType, m.AggregateID, err)
	}
	return s.Changed, nil
}

// recordRetried records m as processed when it is an event this consumer
// set aside and an operator retried; it returns false otherwise.
func recordRetried(ctx context.Context, tx dialect.ExecQuerier, t Tables, m events.Meta) (bool, error) {
	var res stdsql.Result
	err := tx.Exec(ctx, t.DB().RecordRetriedQuery(), []any{m.Consumer, m.EventID, m.Name, max(m.Attempt, 1)}, &res)
	if err != nil {
		return false, fmt.Errorf("consumer: recording event %s as processed by %q: %w", m.EventID, m.Consumer, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

func ScanBool(rows *entsql.Rows) (bool, error) {
	defer rows.Close()
	var b bool
	if rows.Next() {
		if err := rows.Scan(&b); err != nil {
			return false, err
		}
	}
	return b, rows.Close()
}

// What a dead letter does to its aggregate's position (DeadLetter.order).
type LetterOrder int

const (
	LetterHolds      LetterOrder = iota // the default: the aggregate waits for the letter's repair
	LetterPassed                        // WithPassOverDeadLetters: the position moves past it
	LetterFollows                       // the aggregate is held already; the letter waits behind the held one
	LetterForMissing                    // seq last+1 never arrived: the aggregate is held at it
)

// HoldOrPass updates the position of m's aggregate in tx, where m's dead
// letter is being stored. A letter passed over that is not its
// aggregate's next one is an *OutOfOrderError (and is not stored): it
// waits for its turn like any event, or the position could not move past
// it.
func HoldOrPass(ctx context.Context, tx dialect.ExecQuerier, t Tables, m events.Meta, order LetterOrder) error {
	tx = On(t, tx)
	p, err := lockPosition(ctx, tx, t, m)
	if err != nil {
		return fmt.Errorf("reading the position of aggregate %s/%s: %w", m.AggregateType, m.AggregateID, err)
	}
	s := m.AggregateSeq
	switch order {
	case LetterFollows:
		return nil
	case LetterPassed:
		switch {
		case s <= p.last || p.held.Valid && s > p.held.Int64:
			return nil // a duplicate, or behind a held letter: the aggregate stays held
		case s > p.last+1:
			return outOfOrder(m, p)
		}
		return moveTo(ctx, tx, t, p, s)
	}
	at, event := s, uuid.NullUUID{UUID: m.EventID, Valid: true}
	if order == LetterForMissing {
		at, event = p.last+1, uuid.NullUUID{}
	}
	if at <= p.last || p.held.Valid && p.held.Int64 <= at {
		return nil // held at this one or an earlier one already
	}
	var res stdsql.Result
	return tx.Exec(ctx, t.DB().HoldQuery(), []any{p.id, at, event}, &res)
}

// moveTo moves position p to seq, past an event not applied (passed
// over), releasing the aggregate when it was held at seq.
func moveTo(ctx context.Context, tx dialect.ExecQuerier, t Tables, p position, seq int64) error {
	var res stdsql.Result
	return tx.Exec(ctx, t.DB().MoveQuery(), []any{p.id, seq}, &res)
}

// PassUnhandled moves the position past m, an event its consumer has no
// handler for, when m is its aggregate's next: the numbers count every
// event of the aggregate on the topic, and the consumer's next event must
// not wait for one it will never apply. It returns false for a duplicate,
// and an *OutOfOrderError or *HeldError like Record.
func PassUnhandled(ctx context.Context, tx dialect.ExecQuerier, t Tables, m events.Meta) (bool, error) {
	tx = On(t, tx)
	p, err := lockPosition(ctx, tx, t, m)
	if err != nil {
		return false, fmt.Errorf("consumer: reading the position of %q on aggregate %s/%s: %w", m.Consumer, m.AggregateType, m.AggregateID, err)
	}
	s := m.AggregateSeq
	switch {
	case s <= p.last:
		return false, nil
	case p.skipped:
		return false, ErrSettle
	case p.held.Valid && s > p.held.Int64:
		var id uuid.UUID
		if p.heldEvent.Valid {
			id = p.heldEvent.UUID
		}
		return false, &HeldError{AggregateType: m.AggregateType, AggregateID: m.AggregateID, Seq: s, HeldSeq: p.held.Int64, HeldEventID: id}
	case s > p.last+1:
		return false, outOfOrder(m, p)
	}
	return true, moveTo(ctx, tx, t, p, s)
}

// NoteWaiting records, in a transaction of its own (the handler's rolls
// back), that m waits for its aggregate's previous event: since when, if
// it is the first, and its seq, if it is the lowest (the mark on which a
// move of the position wakes the waiters: wake.go). It returns the gap as
// it is now, or nil when there is none, like LookAtPosition.
func NoteWaiting(ctx context.Context, db dialect.ExecQuerier, t Tables, m events.Meta) (gap *OutOfOrderError, err error) {
	args := []any{m.Consumer, m.Topic, m.AggregateType, m.AggregateID, m.AggregateSeq}
	if t.Dialect == outboxdb.MySQL { // no RETURNING: the note, then the read
		err = InTx(ctx, db, func(ctx context.Context, tx dialect.ExecQuerier) error {
			var res stdsql.Result
			if err := On(t, tx).Exec(ctx, t.DB().NoteWaitingQuery(), args, &res); err != nil {
				return err
			}
			gap, err = LookAtPosition(ctx, tx, t, m)
			return err
		})
	} else {
		var rows entsql.Rows
		if err = db.Query(ctx, t.DB().NoteWaitingQuery(), args, &rows); err == nil {
			gap, err = scanGap(&rows, m)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("consumer: noting that %q waits on aggregate %s/%s: %w", m.Consumer, m.AggregateType, m.AggregateID, err)
	}
	return gap, nil
}

// StartAggregate starts m's aggregate, to which m's consumer has applied
// nothing, at its lowest waiting seq, once that waited startAfter. It
// returns that seq, or 0 when the aggregate was not started.
func StartAggregate(ctx context.Context, db dialect.ExecQuerier, t Tables, m events.Meta, startAfter time.Duration) (int64, error) {
	if t.Dialect == outboxdb.MySQL {
		return startAggregateMySQL(ctx, db, t, m, startAfter)
	}
	var rows entsql.Rows
	// The lowest waiting event may wait in another instance: it is woken.
	err := db.Query(ctx, t.DB().StartAggregateQuery(),
		[]any{m.Consumer, m.Topic, m.AggregateType, m.AggregateID, startAfter.Seconds()}, &rows)
	if err != nil {
		return 0, fmt.Errorf("consumer: starting aggregate %s/%s for %q: %w", m.AggregateType, m.AggregateID, m.Consumer, err)
	}
	defer rows.Close()
	var seq int64
	if rows.Next() {
		if err := rows.Scan(&seq); err != nil {
			return 0, err
		}
	}
	return seq, rows.Close()
}

// startAggregateMySQL is StartAggregate without RETURNING: the seq it
// started at is the statement's LAST_INSERT_ID(expr).
func startAggregateMySQL(ctx context.Context, db dialect.ExecQuerier, t Tables, m events.Meta, startAfter time.Duration) (int64, error) {
	var res stdsql.Result
	err := On(t, db).Exec(ctx, t.DB().StartAggregateQuery(),
		[]any{m.Consumer, m.Topic, m.AggregateType, m.AggregateID, startAfter.Seconds()}, &res)
	var seq int64
	if err == nil {
		var n int64
		if n, err = res.RowsAffected(); err == nil && n == 1 {
			seq, err = res.LastInsertId()
		}
	}
	if err != nil {
		return 0, fmt.Errorf("consumer: starting aggregate %s/%s for %q: %w", m.AggregateType, m.AggregateID, m.Consumer, err)
	}
	return seq, nil
}

// LookAtPosition reads m's aggregate's position without locking it, for a
// delivery that waits for its turn: the gap as it is now, or nil when m
// may be its aggregate's next, or is behind a held one, or was applied
// (the handler's path tells which).
func LookAtPosition(ctx context.Context, db dialect.ExecQuerier, t Tables, m events.Meta) (*OutOfOrderError, error) {
	db = On(t, db)
	var rows entsql.Rows
	err := db.Query(ctx, t.DB().PositionQuery(), []any{m.Consumer, m.Topic, m.AggregateType, m.AggregateID}, &rows)
	if err != nil {
		return nil, fmt.Errorf("consumer: reading the position of %q on aggregate %s/%s: %w", m.Consumer, m.AggregateType, m.AggregateID, err)
	}
	return scanGap(&rows, m)
}

// scanGap reads a position's last_seq, whether it is held, how long it
// has been waited on and its mark, and returns m's gap, nil when there is
// none.
func scanGap(rows *entsql.Rows, m events.Meta) (*OutOfOrderError, error) {
	defer rows.Close()
	if !rows.Next() {
		return nil, rows.Err() // no position: cleared
	}
	var p position
	var held bool
	var mark stdsql.NullInt64
	if err := rows.Scan(&p.last, &held, &p.waited, &mark); err != nil {
		return nil, err
	}
	if held || m.AggregateSeq <= p.last+1 {
		return nil, rows.Close()
	}
	gap := outOfOrder(m, p)
	gap.Mark = mark.Int64
	return gap, rows.Close()
}

// Tables names the tables of a generated handler set (consumer.Tables).
type Tables struct {
	Processed   string // the processed-events (dedupe) table
	DeadLetters string // the dead-letter table
	// Positions is the consumers' per-aggregate positions table
	// (schema.ConsumerPosition); "" when the application has none, and
	// then an aggregate's events are not put in order by the consumer.
	Positions string
	// Dialect is the database the tables live in; the handler set sets it
	// from its database (PostgreSQL when zero).
	Dialect outboxdb.Dialect
}

// DB is t as internal/outboxdb names them, for its statements.
func (t Tables) DB() outboxdb.Tables {
	return outboxdb.Tables{Processed: t.Processed, DeadLetters: t.DeadLetters, Positions: t.Positions, Dialect: t.Dialect}
}

// serial tells whether t's statements are SQLite's or MySQL's: there a
// statement that does several things on PostgreSQL is several, run here
// in order.
func (t Tables) serial() bool { return t.Dialect == outboxdb.SQLite || t.Dialect == outboxdb.MySQL }

// On is q running t's statements: bound on their way to MySQL, whose
// placeholders are not numbered (outboxdb.Bind). A function, not a method:
// Tables is the consumer package's, for generated code.
func On(t Tables, q dialect.ExecQuerier) dialect.ExecQuerier { return outboxdb.Bound(q, t.Dialect) }

// InTx runs f in a transaction of db's when db is a driver, else on db.
func InTx(ctx context.Context, db dialect.ExecQuerier, f func(context.Context, dialect.ExecQuerier) error) error {
	drv, ok := db.(dialect.Driver)
	if !ok {
		return f(ctx, db)
	}
	tx, err := drv.Tx(ctx)
	if err != nil {
		return err
	}
	if err := f(ctx, tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
