package admin

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/ent"
	"github.com/entoutbox/entoutbox/ent/deadletter"
	outboxrow "github.com/entoutbox/entoutbox/ent/outbox"
	"github.com/entoutbox/entoutbox/ent/predicate"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/retention"
	"github.com/entoutbox/entoutbox/outbox"
	"github.com/entoutbox/entoutbox/schema"
)

// Admin repairs the outbox tables reached through an ent client.
type Admin struct {
	client *ent.Client
}

// New returns an Admin working through client.
func New(client *ent.Client) *Admin { return &Admin{client: client} }

// State is what was done with a dead letter.
type State string

const (
	StateOpen      State = "open"      // neither retried nor discarded
	StateRetried   State = "retried"   // back in the outbox
	StateDiscarded State = "discarded" // set aside for good
)

// StateOf tells what was done with d.
func StateOf(d *ent.DeadLetter) State {
	switch {
	case d.RetriedAt != nil:
		return StateRetried
	case d.DiscardedAt != nil:
		return StateDiscarded
	}
	return StateOpen
}

// EventID is the id of d's event, retried or not (a retried letter keeps it
// in retried_event_id); uuid.Nil when the message had none.
func EventID(d *ent.DeadLetter) uuid.UUID {
	if d.RetriedEventID != nil {
		return *d.RetriedEventID
	}
	return d.EventID
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

func (f Filter) predicates() ([]predicate.DeadLetter, error) {
	var ps []predicate.DeadLetter
	if f.Source != "" {
		ps = append(ps, deadletter.SourceEQ(f.Source))
	}
	if f.Event != "" {
		ps = append(ps, deadletter.EventNameEQ(f.Event))
	}
	if f.Reason != "" {
		ps = append(ps, deadletter.ReasonContains(f.Reason))
	}
	if !f.Since.IsZero() {
		ps = append(ps, deadletter.CreatedAtGTE(f.Since))
	}
	if !f.Until.IsZero() {
		ps = append(ps, deadletter.CreatedAtLT(f.Until))
	}
	switch f.State {
	case "":
	case StateOpen:
		ps = append(ps, deadletter.RetriedAtIsNil(), deadletter.DiscardedAtIsNil())
	case StateRetried:
		ps = append(ps, deadletter.RetriedAtNotNil())
	case StateDiscarded:
		ps = append(ps, deadletter.DiscardedAtNotNil())
	default:
		return nil, fmt.Errorf("admin: unknown dead-letter state %q (want open, retried or discarded)", f.State)
	}
	return ps, nil
}

// DeadLetters lists the dead letters f selects, newest first.
func (a *Admin) DeadLetters(ctx context.Context, f Filter) ([]*ent.DeadLetter, error) {
	ps, err := f.predicates()
	if err != nil {
		return nil, err
	}
	q := a.client.DeadLetter.Query().Where(ps...).Order(deadletter.ByID(entsql.OrderDesc()))
	if f.Limit > 0 {
		q = q.Limit(f.Limit)
	}
	ds, err := q.All(ctx)
	if err != nil {
		return nil, fmt.Errorf("admin: listing dead letters: %w", err)
	}
	return ds, nil
}

// ErrNotFound is returned for a dead-letter id that does not exist.
var ErrNotFound = errors.New("admin: no such dead letter")

// DeadLetter returns the dead letter id.
func (a *Admin) DeadLetter(ctx context.Context, id int64) (*ent.DeadLetter, error) {
	d, err := a.client.DeadLetter.Get(ctx, id)
	if ent.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("admin: reading dead letter %d: %w", id, err)
	}
	return d, nil
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
}

// Retry puts the events of the dead letters ids back in the outbox, pending,
// with their original ids (see the package doc), and marks each letter
// retried. Each letter is retried in a transaction of its own; a letter
// already retried or discarded, or one that cannot be rebuilt as an outbox
// row, is Skipped, saying why. An id that does not exist is an error
// (ErrNotFound), after the letters before it were retried.
func (a *Admin) Retry(ctx context.Context, ids ...int64) ([]Result, error) {
	var out []Result
	for _, id := range ids {
		r, err := a.retryOne(ctx, id)
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

// openIDs lists the open letters f selects, oldest first.
func (a *Admin) openIDs(ctx context.Context, f Filter) ([]int64, error) {
	f.State = StateOpen
	ps, err := f.predicates()
	if err != nil {
		return nil, err
	}
	q := a.client.DeadLetter.Query().Where(ps...).Order(deadletter.ByID())
	if f.Limit > 0 {
		q = q.Limit(f.Limit)
	}
	ids, err := q.IDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("admin: listing dead letters: %w", err)
	}
	return ids, nil
}

func (a *Admin) retryOne(ctx context.Context, id int64) (res Result, err error) {
	tx, err := a.client.Tx(ctx)
	if err != nil {
		return res, fmt.Errorf("admin: retrying dead letter %d: %w", id, err)
	}
	defer func() {
		if err != nil || res.Outcome == Skipped {
			_ = tx.Rollback()
			return
		}
		if cerr := tx.Commit(); cerr != nil {
			err = fmt.Errorf("admin: retrying dead letter %d: %w", id, cerr)
		}
	}()
	// The lock makes a concurrent retry of the same letter wait, then
	// find it retried.
	d, err := tx.DeadLetter.Query().Where(deadletter.ID(id)).ForUpdate().Only(ctx)
	if ent.IsNotFound(err) {
		return res, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	if err != nil {
		return res, fmt.Errorf("admin: retrying dead letter %d: %w", id, err)
	}
	res = Result{Letter: id, EventID: EventID(d), Source: d.Source}
	skip := func(why string) (Result, error) {
		res.Outcome, res.Why = Skipped, why
		return res, nil
	}
	switch {
	case d.RetriedAt != nil:
		return skip("already retried at " + d.RetriedAt.UTC().Format(time.RFC3339))
	case d.DiscardedAt != nil:
		return skip("discarded at " + d.DiscardedAt.UTC().Format(time.RFC3339))
	case d.EventID == uuid.Nil:
		return skip("the message had no event id")
	}
	var why string
	res.Outcome, why, err = requeue(ctx, tx, d)
	if err != nil {
		return res, fmt.Errorf("admin: retrying dead letter %d: %w", id, err)
	}
	if res.Outcome == Skipped {
		return skip(why)
	}
	err = tx.DeadLetter.UpdateOneID(id).SetRetriedAt(time.Now()).SetRetriedEventID(d.EventID).ClearEventID().Exec(ctx)
	if err != nil {
		return res, fmt.Errorf("admin: marking dead letter %d retried: %w", id, err)
	}
	return res, nil
}

// requeue makes d's event a pending outbox row in tx, with its original id:
// the retained row written again at the end of the outbox, or one rebuilt
// from d. It says why when d cannot be rebuilt (Skipped).
func requeue(ctx context.Context, tx *ent.Tx, d *ent.DeadLetter) (Outcome, string, error) {
	var (
		row     outbox.Row
		outcome Outcome
	)
	o, err := tx.Outbox.Query().Where(outboxrow.EventID(d.EventID)).ForUpdate().Only(ctx)
	// The WAL read path delivers without stamping delivered_at.
	walDelivered := false
	if err == nil && o.DeliveredAt == nil {
		if walDelivered, err = outboxdb.New(schema.OutboxTable, "").WALDelivered(ctx, tx, o.ID); err != nil {
			return "", "", err
		}
	}
	switch {
	case ent.IsNotFound(err):
		var why string
		if row, why = rowOf(d); why != "" {
			return Skipped, why, nil
		}
		outcome = Rebuilt
	case err != nil:
		return "", "", fmt.Errorf("reading the outbox row of event %s: %w", d.EventID, err)
	case o.DeliveredAt == nil && !walDelivered:
		// Another letter of the event (a second consumer's) was retried
		// first, or the event was never delivered: the relay has it.
		return AlreadyPending, "", nil
	default:
		if err := tx.Outbox.DeleteOneID(o.ID).Exec(ctx); err != nil {
			return "", "", fmt.Errorf("deleting the delivered outbox row of event %s: %w", d.EventID, err)
		}
		row = outbox.Row{EventID: o.EventID, Headers: o.Headers, Event: outbox.Event{
			Name: o.EventName, Version: o.EventVersion, Topic: o.Topic,
			AggregateType: o.AggregateType, AggregateID: o.AggregateID, Payload: o.Payload},
			AggregateSeq: seqOf(o.AggregateSeq)}
		outcome = Requeued
	}
	// The writer's own INSERT, with the NOTIFY that wakes the fast relay.
	q, args, err := outbox.InsertQuery(schema.OutboxTable, []outbox.Row{row})
	if err != nil {
		return "", "", err
	}
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return "", "", fmt.Errorf("writing event %s to the outbox: %w", row.EventID, err)
	}
	return outcome, "", nil
}

// rowOf rebuilds the outbox row of d's event, or says why it cannot: the
// letter of a malformed message may lack what a row needs, or hold what
// the outbox cannot store.
func rowOf(d *ent.DeadLetter) (outbox.Row, string) {
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
		AggregateSeq: seqOf(d.AggregateSeq)}, ""
}

// seqOf is a row's aggregate_seq, 0 when it has none. A retried event keeps
// its place in its aggregate's order: the consumer holding the aggregate
// behind it applies it, the others skip it as at or below their position.
func seqOf(seq *int64) int64 {
	if seq == nil {
		return 0
	}
	return *seq
}

// Discard marks the dead letters ids discarded, with note, in one
// transaction. Nothing is deleted: the letter stays, and its consumer
// still skips the event. A letter already retried or discarded is Skipped.
func (a *Admin) Discard(ctx context.Context, note string, ids ...int64) (_ []Result, err error) {
	if note == "" {
		return nil, errors.New("admin: a discard needs a note saying why")
	}
	tx, err := a.client.Tx(ctx)
	if err != nil {
		return nil, fmt.Errorf("admin: discarding dead letters: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
			return
		}
		if cerr := tx.Commit(); cerr != nil {
			err = fmt.Errorf("admin: discarding dead letters: %w", cerr)
		}
	}()
	ds, err := tx.DeadLetter.Query().Where(deadletter.IDIn(ids...)).ForUpdate().All(ctx)
	if err != nil {
		return nil, fmt.Errorf("admin: discarding dead letters: %w", err)
	}
	byID := make(map[int64]*ent.DeadLetter, len(ds))
	for _, d := range ds {
		byID[d.ID] = d
	}
	now := time.Now()
	out := make([]Result, 0, len(ids))
	for _, id := range ids {
		d, ok := byID[id]
		if !ok {
			return nil, fmt.Errorf("%w: %d", ErrNotFound, id)
		}
		r := Result{Letter: id, EventID: EventID(d), Source: d.Source, Outcome: Discarded}
		switch StateOf(d) {
		case StateRetried:
			r.Outcome, r.Why = Skipped, "retried at "+d.RetriedAt.UTC().Format(time.RFC3339)
		case StateDiscarded:
			r.Outcome, r.Why = Skipped, "already discarded at "+d.DiscardedAt.UTC().Format(time.RFC3339)
		default:
			if err := tx.DeadLetter.UpdateOneID(id).SetDiscardedAt(now).SetDiscardNote(note).Exec(ctx); err != nil {
				return nil, fmt.Errorf("admin: discarding dead letter %d: %w", id, err)
			}
			d.DiscardedAt = &now // a repeated id is then skipped
		}
		out = append(out, r)
	}
	return out, nil
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

// PurgeSettled deletes the dead letters retried or discarded more than
// keep ago, batch rows per statement, and returns how many. Open
// letters are never deleted. A purged discarded letter no longer keeps its
// consumer from handling the event, should it be delivered again.
func PurgeSettled(ctx context.Context, db *sql.DB, keep time.Duration, batch int) (int64, error) {
	if keep < 0 {
		return 0, fmt.Errorf("admin: retention %s must not be negative", keep)
	}
	cutoff := time.Now().Add(-keep)
	var total int64
	for _, column := range []string{deadletter.FieldRetriedAt, deadletter.FieldDiscardedAt} {
		n, err := retention.Delete(ctx, db, schema.DeadLetterTable, column, cutoff, batch)
		total += n
		if err != nil {
			return total, fmt.Errorf("admin: %w", err)
		}
	}
	return total, nil
}
