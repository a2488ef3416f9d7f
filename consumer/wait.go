package consumer

import (
	"context"
	"fmt"
	"time"

	"entgo.io/ent/dialect"

	"github.com/entoutbox/entoutbox/events"
)

// Waiting for an aggregate's previous event (a gap). The previous event is
// usually being handled by another instance, or by this one, at the same
// moment: the event tries again after a short pause, up to GapWait in
// this delivery; then it is nacked, so that a predecessor held by a killed
// instance, which the broker delivers again after its own timeout, gets
// its turn; a gap the aggregate has waited on longer than GapWait already
// is nacked after a short pause, so that a predecessor that may be long
// in coming does not take the slot from other aggregates' events. A gap
// the aggregate has waited on longer than MaxGap (whatever
// the deliveries and instances) is an event that never comes: the waiting
// event goes to the dead letters and the aggregate is held at the missing
// one. An aggregate the consumer has applied nothing of starts at its
// lowest waiting event after StartAfter instead.

// The pause between two tries of an event waiting for its turn doubles
// from gapPauseMin up to gapPauseMax.
const (
	gapPauseMin = 5 * time.Millisecond
	gapPauseMax = 200 * time.Millisecond
	// gapPauseBehind is the pause of an event behind another of its
	// aggregate that waits here too (turns.go): woken when that one is
	// applied or stops waiting, it looks itself only after this.
	gapPauseBehind = 2 * time.Second
)

// gapWait is one delivery's wait for its turn.
type gapWait struct {
	since time.Time // when this delivery began to wait
	noted bool      // the wait is in the position (waiting_since, waiting_seq)
	pause time.Duration
}

// missingError is the reason an event goes to the dead letters when the
// event before it never came.
type missingError struct{ gap *OutOfOrderError }

func (e *missingError) Error() string {
	return fmt.Sprintf("held: seq %d of aggregate %s/%s on %q never arrived (the aggregate waited %s for it, MaxGap); "+
		"this event (seq %d) waits for its repair: a relay dead letter of seq %d is retried with `entoutbox dead-letters retry`, "+
		"then this one", e.gap.Want, e.gap.AggregateType, e.gap.AggregateID, e.gap.Topic, e.gap.Waited.Round(time.Second),
		e.gap.Got, e.gap.Want)
}

// waitTurn waits before m tries again to be its aggregate's next event. It
// returns nil to try again, a *missingError when the gap is older than
// MaxGap, and another error when the delivery is to be nacked.
func (s *Set) waitTurn(ctx context.Context, w *gapWait, m events.Meta, gap *OutOfOrderError) error {
	if w.since.IsZero() {
		w.since, w.pause = time.Now(), gapPauseMin
		s.cfg.Metrics.WaitedForTurn(m.Consumer)
	}
	if !w.noted || gap.Waited == 0 {
		w.noted = true
		err := s.onPositions(ctx, func(ctx context.Context, db dialect.ExecQuerier, t Tables) (err error) {
			gap, err = noteWaiting(ctx, db, t, m)
			return err
		})
		if err != nil {
			return err
		}
	}
	if gap.Want == 1 && s.cfg.StartAfter > 0 && gap.Waited >= s.cfg.StartAfter {
		var at int64
		err := s.onPositions(ctx, func(ctx context.Context, db dialect.ExecQuerier, t Tables) (err error) {
			at, err = startAggregate(ctx, db, t, m, s.cfg.StartAfter)
			return err
		})
		if err != nil {
			return err
		}
		if at > 0 {
			s.cfg.Logger.Info(fmt.Sprintf("consumer %s starts aggregate %s/%s at seq %d: earlier events were never delivered to it",
				m.Consumer, m.AggregateType, m.AggregateID, at), map[string]any{
				"consumer": m.Consumer, "topic": m.Topic, "aggregate_type": m.AggregateType, "aggregate_id": m.AggregateID,
				"seq": at, "waited": gap.Waited.String()})
		}
		return nil // started here or by another delivery: try again at once
	}
	if gap.Waited >= s.cfg.MaxGap {
		return &missingError{gap: gap}
	}
	// A gap older than GapWait is not one another instance is about to
	// fill: after a pause (so that a broker that redelivers at once does
	// not spin), the slot goes to other aggregates' events.
	long := gap.Waited >= s.cfg.GapWait
	if long {
		w.pause = gapPauseMax
	}
	if long && time.Since(w.since) >= gapPauseMax || time.Since(w.since) >= s.cfg.GapWait {
		return fmt.Errorf("consumer: %q: event %s (seq %d of aggregate %s/%s) waited %s in this delivery for seq %d; nacked, to come again",
			m.Consumer, m.EventID, m.AggregateSeq, m.AggregateType, m.AggregateID, s.cfg.GapWait, gap.Want)
	}
	applied, lowest, done := s.turns.wait(m)
	defer done()
	pause := w.pause
	if !lowest {
		// An earlier event of the aggregate waits here: it looks at the
		// position, and this one is woken when it is applied.
		pause = gapPauseBehind
	}
	select {
	case <-ctx.Done():
		return fmt.Errorf("consumer: %q stopped while event %s waited for seq %d of its aggregate: %w", m.Consumer, m.EventID, gap.Want, ctx.Err())
	case <-time.After(pause):
		w.pause = min(2*w.pause, gapPauseMax)
	case <-applied: // an event of the aggregate was applied here: maybe the one it waits for
		w.pause = gapPauseMin
	}
	return nil
}

// onPositions runs write on the consumers' database, outside any
// handler's transaction.
func (s *Set) onPositions(ctx context.Context, write func(context.Context, dialect.ExecQuerier, Tables) error) error {
	return write(ctx, s.db, s.tables)
}

// holdOrPass applies the set's dead-letter policy to m's aggregate, for m
// that is in this consumer's dead letters already.
func (s *Set) holdOrPass(m events.Meta) func(context.Context, dialect.ExecQuerier, Tables) error {
	return func(ctx context.Context, db dialect.ExecQuerier, t Tables) error {
		return inTx(ctx, db, func(ctx context.Context, tx dialect.ExecQuerier) error {
			return holdOrPass(ctx, tx, t, m, s.letterOrder())
		})
	}
}

// inTx runs f in a transaction of db's when db is a driver, else on db.
func inTx(ctx context.Context, db dialect.ExecQuerier, f func(context.Context, dialect.ExecQuerier) error) error {
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
