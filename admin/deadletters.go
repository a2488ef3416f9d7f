package admin

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/outbox"
)

// State is what was done with a dead letter.
type State string

const (
	StateOpen      State = outboxdb.LetterOpen      // neither retried nor discarded
	StateRetried   State = outboxdb.LetterRetried   // back in the outbox
	StateDiscarded State = outboxdb.LetterDiscarded // set aside for good
)

// DeadLetter is an event the relay or a consumer gave up on, with the
// reason, and what an operator did with it.
type DeadLetter struct {
	ID int64 `json:"id"`
	// EventID is the event's id, also once the letter was retried;
	// uuid.Nil (JSON null) when the message had none.
	EventID       uuid.UUID `json:"event_id"`
	Source        string    `json:"source"` // "relay" or the consumer's name
	EventName     string    `json:"event_name"`
	EventVersion  int       `json:"event_version"`
	Topic         string    `json:"topic"`
	AggregateType string    `json:"aggregate_type"`
	AggregateID   string    `json:"aggregate_id"`
	// AggregateSeq is the event's place in its aggregate's order on its
	// topic, which a retry keeps; 0 when it had none.
	AggregateSeq int64 `json:"aggregate_seq,omitempty"`
	// Payload is as received, which may not be JSON. In JSON it is
	// "payload" when it is JSON, else "payload_text" when it is UTF-8,
	// else "payload_base64".
	Payload []byte `json:"-"`
	// Headers are as stored, which may not be a JSON object of strings;
	// JSON "headers" when they are JSON.
	Headers     []byte     `json:"-"`
	Reason      string     `json:"reason"`
	Attempts    int        `json:"attempts"`
	CreatedAt   time.Time  `json:"created_at"` // when it was dead-lettered
	RetriedAt   *time.Time `json:"retried_at,omitempty"`
	DiscardedAt *time.Time `json:"discarded_at,omitempty"`
	DiscardNote string     `json:"discard_note,omitempty"`
}

// State tells what was done with d.
func (d DeadLetter) State() State {
	switch {
	case d.RetriedAt != nil:
		return StateRetried
	case d.DiscardedAt != nil:
		return StateDiscarded
	}
	return StateOpen
}

// MarshalJSON writes d with its state, and its payload and headers as
// JSON when they are.
func (d DeadLetter) MarshalJSON() ([]byte, error) {
	type fields DeadLetter // without this method
	v := struct {
		fields
		EventID       *uuid.UUID      `json:"event_id"`
		State         State           `json:"state"`
		Headers       json.RawMessage `json:"headers,omitempty"`
		Payload       json.RawMessage `json:"payload,omitempty"`
		PayloadText   string          `json:"payload_text,omitempty"`
		PayloadBase64 []byte          `json:"payload_base64,omitempty"`
	}{fields: fields(d), State: d.State()}
	if d.EventID != uuid.Nil {
		v.EventID = &d.EventID
	}
	if len(d.Headers) > 0 && json.Valid(d.Headers) {
		v.Headers = d.Headers
	}
	switch {
	case len(d.Payload) == 0:
	case json.Valid(d.Payload):
		v.Payload = d.Payload
	case utf8.Valid(d.Payload):
		v.PayloadText = string(d.Payload)
	default:
		v.PayloadBase64 = d.Payload
	}
	return json.Marshal(v)
}

// Filter selects dead letters; its zero value selects all of them.
type Filter struct {
	Source string    // "relay" or a consumer name; "" for any
	Event  string    // event name; "" for any
	Reason string    // a substring of the reason; "" for any
	Since  time.Time // dead-lettered at or after; zero for no bound
	Until  time.Time // dead-lettered before; zero for no bound
	State  State     // "" for any
	Limit  int       // at most this many, newest first; 0 for all
}

func (f Filter) letters() outboxdb.LetterFilter {
	return outboxdb.LetterFilter{Source: f.Source, Event: f.Event, Reason: f.Reason, Since: f.Since, Until: f.Until,
		State: string(f.State), Limit: f.Limit}
}

// ListDeadLetters lists the dead letters f selects, newest first.
func (a *Admin) ListDeadLetters(ctx context.Context, f Filter) ([]DeadLetter, error) {
	ds, err := a.tables.ReadDeadLetters(ctx, a.db, f.letters())
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	out := make([]DeadLetter, len(ds))
	for i, d := range ds {
		out[i] = DeadLetter(d)
	}
	return out, nil
}

// ErrNotFound is returned for a dead-letter id that does not exist.
var ErrNotFound = errors.New("admin: no such dead letter")

// DeadLetterByID returns the dead letter id; ErrNotFound when there is
// none.
func (a *Admin) DeadLetterByID(ctx context.Context, id int64) (DeadLetter, error) {
	d, err := a.tables.ReadDeadLetter(ctx, a.db, id)
	if errors.Is(err, sql.ErrNoRows) {
		return DeadLetter{}, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	if err != nil {
		return DeadLetter{}, fmt.Errorf("admin: %w", err)
	}
	return DeadLetter(d), nil
}

// Outcome is what a retry or a discard did with one dead letter.
type Outcome string

const (
	// Requeued: the event's retained outbox row was written again, pending.
	Requeued Outcome = "requeued"
	// Rebuilt: the event was written to the outbox from the dead letter.
	Rebuilt Outcome = "rebuilt"
	// AlreadyPending: the event's outbox row was pending already; the
	// letter is marked retried and the row left as it is.
	AlreadyPending Outcome = "already pending"
	// Discarded: the letter is marked discarded.
	Discarded Outcome = "discarded"
	// Skipped: nothing was done; Result.Why says why.
	Skipped Outcome = "skipped"
)

// Result is what happened to one dead letter.
type Result struct {
	Letter  int64     `json:"letter"`
	EventID uuid.UUID `json:"event_id"`
	Source  string    `json:"source"`
	Outcome Outcome   `json:"outcome"`
	Why     string    `json:"why,omitempty"` // for Skipped
	// Positions are the consumers' positions on the letter's aggregate
	// that the repair moved or held (see the package doc).
	Positions []Position `json:"positions,omitempty"`
}

// Retry puts the events of the dead letters ids back in the outbox, pending,
// with their original ids (see the package doc), and marks each letter
// retried. Each letter is retried in a transaction of its own; a letter
// already retried or discarded, or one that cannot be rebuilt as an outbox
// row, is Skipped, saying why. An id that does not exist is an error
// (ErrNotFound), after the letters before it were retried.
func (a *Admin) Retry(ctx context.Context, ids ...int64) ([]Result, error) {
	return a.retry(ctx, true, ids)
}

// PlanRetry tells what Retry would do with the dead letters ids, and
// changes nothing: each letter's retry runs as Retry runs it, in a
// transaction that is rolled back.
func (a *Admin) PlanRetry(ctx context.Context, ids ...int64) ([]Result, error) {
	return a.retry(ctx, false, ids)
}

func (a *Admin) retry(ctx context.Context, commit bool, ids []int64) ([]Result, error) {
	var out []Result
	for _, id := range ids {
		r, err := a.retryOne(ctx, id, commit)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// RetryMatching retries the open dead letters f selects (f.State is
// ignored), oldest first.
func (a *Admin) RetryMatching(ctx context.Context, f Filter) ([]Result, error) {
	ids, err := a.openIDs(ctx, f)
	if err != nil {
		return nil, err
	}
	return a.Retry(ctx, ids...)
}

// PlanRetryMatching tells what RetryMatching would do, as PlanRetry, and
// changes nothing.
func (a *Admin) PlanRetryMatching(ctx context.Context, f Filter) ([]Result, error) {
	ids, err := a.openIDs(ctx, f)
	if err != nil {
		return nil, err
	}
	return a.PlanRetry(ctx, ids...)
}

// OpenDeadLetterIDs lists the open dead letters f selects (f.State is
// ignored), oldest first: those RetryMatching and DiscardMatching act on.
// An operator can see how many they are, and then act on those alone.
func (a *Admin) OpenDeadLetterIDs(ctx context.Context, f Filter) ([]int64, error) {
	return a.openIDs(ctx, f)
}

// openIDs lists the open letters f selects, oldest first.
func (a *Admin) openIDs(ctx context.Context, f Filter) ([]int64, error) {
	f.State = StateOpen
	ids, err := a.tables.ReadDeadLetterIDs(ctx, a.db, f.letters())
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	return ids, nil
}

// retryOne retries the dead letter id in a transaction of its own,
// committed when commit is set and rolled back otherwise.
func (a *Admin) retryOne(ctx context.Context, id int64, commit bool) (res Result, err error) {
	err = a.inTx(ctx, func(tx tx) (bool, error) {
		// The lock makes a concurrent retry of the same letter wait, then
		// find it retried.
		ds, err := a.tables.LockDeadLetters(ctx, tx, id)
		if err != nil {
			return false, err
		}
		if len(ds) == 0 {
			return false, fmt.Errorf("%w: %d", ErrNotFound, id)
		}
		d := DeadLetter(ds[0])
		res = Result{Letter: id, EventID: d.EventID, Source: d.Source}
		skip := func(why string) (bool, error) {
			res.Outcome, res.Why = Skipped, why
			return false, nil
		}
		switch {
		case d.RetriedAt != nil:
			return skip("already retried at " + d.RetriedAt.UTC().Format(time.RFC3339))
		case d.DiscardedAt != nil:
			return skip("discarded at " + d.DiscardedAt.UTC().Format(time.RFC3339))
		case d.EventID == uuid.Nil:
			return skip("the message had no event id")
		}
		outcome, why, err := a.requeue(ctx, tx, d)
		if err != nil {
			return false, err
		}
		if outcome == Skipped {
			return skip(why)
		}
		res.Outcome = outcome
		if err := a.tables.MarkRetried(ctx, tx, id, time.Now()); err != nil {
			return false, err
		}
		if k, ok := keyOf(d); ok {
			if res.Positions, err = a.settle(ctx, tx, k); err != nil {
				return false, err
			}
		}
		return commit, nil
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		err = fmt.Errorf("admin: retrying dead letter %d: %w", id, err)
	}
	return res, err
}

// requeue makes d's event a pending outbox row in tx, with its original id:
// the retained row written again at the end of the outbox, or one rebuilt
// from d. It says why when d cannot be rebuilt (Skipped).
func (a *Admin) requeue(ctx context.Context, tx tx, d DeadLetter) (Outcome, string, error) {
	delivery, err := a.tables.ReadDelivery(ctx, tx)
	if err != nil {
		return "", "", err
	}
	o, err := a.tables.ReadRowOfEvent(ctx, tx, delivery, d.EventID, true)
	var (
		row     outbox.Row
		outcome Outcome
	)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		var why string
		if row, why = rowOf(d); why != "" {
			return Skipped, why, nil
		}
		outcome = Rebuilt
	case err != nil:
		return "", "", err
	case !o.Delivered:
		// Another letter of the event (a second consumer's) was retried
		// first, or the event was never delivered: the relay has it.
		return AlreadyPending, "", nil
	default:
		if row, err = outboxRowOf(o); err != nil {
			return "", "", err
		}
		if err := a.tables.DeleteRow(ctx, tx, o.ID); err != nil {
			return "", "", err
		}
		outcome = Requeued
	}
	// The writer's own INSERT, with the NOTIFY that wakes the fast relay.
	q, args, err := outbox.InsertQueryOn(string(a.tables.Dialect), a.tables.Outbox, []outbox.Row{row})
	if err != nil {
		return "", "", err
	}
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return "", "", fmt.Errorf("writing event %s to the outbox: %w", row.EventID, err)
	}
	return outcome, "", nil
}

// outboxRowOf is the delivered outbox row o, to be written again as it was.
func outboxRowOf(o outboxdb.Row) (outbox.Row, error) {
	var headers map[string]string
	if len(o.Headers) > 0 {
		if err := json.Unmarshal(o.Headers, &headers); err != nil {
			return outbox.Row{}, fmt.Errorf("reading the headers of outbox row %d: %w", o.ID, err)
		}
	}
	return outbox.Row{EventID: o.EventID, Headers: headers, Event: outbox.Event{
		Name: o.EventName, Version: o.EventVersion, Topic: o.Topic, AggregateType: o.AggregateType,
		AggregateID: o.AggregateID, Payload: o.Payload, ReadableFrom: o.ReadableFrom},
		AggregateSeq: o.AggregateSeq}, nil
}

// rowOf rebuilds the outbox row of d's event, or says why it cannot: the
// letter of a malformed message may lack what a row needs, or hold what
// the outbox cannot store. A retried event keeps its place in its
// aggregate's order (AggregateSeq): the consumer holding the aggregate
// behind it applies it, the others skip it as at or below their position.
func rowOf(d DeadLetter) (outbox.Row, string) {
	switch {
	case d.EventName == "" || d.EventVersion <= 0:
		return outbox.Row{}, "the letter has no event name or version"
	case d.Topic == "":
		return outbox.Row{}, "the letter has no topic"
	case d.AggregateType == "" || d.AggregateID == "":
		return outbox.Row{}, "the letter has no aggregate"
	case !json.Valid(d.Payload):
		return outbox.Row{}, "the payload is not JSON, which the outbox cannot hold"
	}
	headers, err := outbox.DecodeHeaders(d.Headers)
	if err != nil {
		return outbox.Row{}, "its headers cannot be sent: " + err.Error()
	}
	return outbox.Row{EventID: d.EventID, Headers: headers, Event: outbox.Event{
		Name: d.EventName, Version: d.EventVersion, Topic: d.Topic,
		AggregateType: d.AggregateType, AggregateID: d.AggregateID, Payload: d.Payload},
		AggregateSeq: d.AggregateSeq}, ""
}

// Discard marks the dead letters ids discarded, with note, in one
// transaction. Nothing is deleted: the letter stays, and its consumer
// still skips the event. A letter already retried or discarded is Skipped.
func (a *Admin) Discard(ctx context.Context, note string, ids ...int64) ([]Result, error) {
	return a.discard(ctx, note, true, ids)
}

// PlanDiscard tells what Discard would do with the dead letters ids, and
// changes nothing: the discard runs as Discard runs it, in a transaction
// that is rolled back.
func (a *Admin) PlanDiscard(ctx context.Context, note string, ids ...int64) ([]Result, error) {
	return a.discard(ctx, note, false, ids)
}

func (a *Admin) discard(ctx context.Context, note string, commit bool, ids []int64) ([]Result, error) {
	if note == "" {
		return nil, errors.New("admin: a discard needs a note saying why")
	}
	var out []Result
	err := a.inTx(ctx, func(tx tx) (bool, error) {
		ds, err := a.tables.LockDeadLetters(ctx, tx, ids...)
		if err != nil {
			return false, err
		}
		byID := make(map[int64]DeadLetter, len(ds))
		for _, d := range ds {
			byID[d.ID] = DeadLetter(d)
		}
		now := time.Now()
		out = make([]Result, 0, len(ids))
		last := map[aggregateKey]int{} // the last letter discarded of each aggregate, in out
		for _, id := range ids {
			d, ok := byID[id]
			if !ok {
				return false, fmt.Errorf("%w: %d", ErrNotFound, id)
			}
			r := Result{Letter: id, EventID: d.EventID, Source: d.Source, Outcome: Discarded}
			switch d.State() {
			case StateRetried:
				r.Outcome, r.Why = Skipped, "retried at "+d.RetriedAt.UTC().Format(time.RFC3339)
			case StateDiscarded:
				r.Outcome, r.Why = Skipped, "already discarded at "+d.DiscardedAt.UTC().Format(time.RFC3339)
			default:
				if err := a.tables.MarkDiscarded(ctx, tx, id, now, note); err != nil {
					return false, err
				}
				d.DiscardedAt = &now // a repeated id is then skipped
				byID[id] = d
				if k, ok := keyOf(d); ok {
					last[k] = len(out)
				}
			}
			out = append(out, r)
		}
		return commit, a.settleDiscarded(ctx, tx, last, out)
	})
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("admin: discarding dead letters: %w", err)
	}
	return out, nil
}

// settleDiscarded settles the positions of the aggregates whose letters
// were discarded, once all are marked, and tells each on the result of its
// aggregate's last letter.
func (a *Admin) settleDiscarded(ctx context.Context, tx tx, last map[aggregateKey]int, out []Result) error {
	// In key order: two discards lock the positions in the same order.
	keys := slices.SortedFunc(maps.Keys(last), func(x, y aggregateKey) int {
		return cmp.Or(cmp.Compare(x.source, y.source), cmp.Compare(x.topic, y.topic),
			cmp.Compare(x.aggregateType, y.aggregateType), cmp.Compare(x.aggregateID, y.aggregateID))
	})
	for _, k := range keys {
		ps, err := a.settle(ctx, tx, k)
		if err != nil {
			return err
		}
		out[last[k]].Positions = append(out[last[k]].Positions, ps...)
	}
	return nil
}

// DiscardMatching discards the open dead letters f selects (f.State is
// ignored), with note.
func (a *Admin) DiscardMatching(ctx context.Context, note string, f Filter) ([]Result, error) {
	ids, err := a.openIDs(ctx, f)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	return a.Discard(ctx, note, ids...)
}

// PlanDiscardMatching tells what DiscardMatching would do, as
// PlanDiscard, and changes nothing.
func (a *Admin) PlanDiscardMatching(ctx context.Context, note string, f Filter) ([]Result, error) {
	ids, err := a.openIDs(ctx, f)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	return a.PlanDiscard(ctx, note, ids...)
}

// PurgeSettled deletes the dead letters retried or discarded more than
// keep ago, batch rows per statement, and returns how many. Open
// letters are never deleted. A purged discarded letter no longer keeps its
// consumer from handling the event, should it be delivered again.
func (a *Admin) PurgeSettled(ctx context.Context, keep time.Duration, batch int) (int64, error) {
	if keep < 0 {
		return 0, fmt.Errorf("admin: retention %s must not be negative", keep)
	}
	n, err := a.tables.PurgeSettled(ctx, a.db, time.Now().Add(-keep), batch)
	if err != nil {
		return n, fmt.Errorf("admin: %w", err)
	}
	return n, nil
}
