package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/consumer/internal/ordering"
	"github.com/entoutbox/entoutbox/events"
)

// Waiting for an aggregate's previous event (a gap). The previous event is
// usually being handled by another instance, or by this one, at the same
// moment. The event waits until it is woken: an event of its aggregate was
// applied, by this set (turns.go) or by another instance (wake.go); or
// until a pause ends, when it looks at the position (a read without a
// lock). Of the events of one aggregate waiting in one instance, only the
// lowest marks the position and looks at it: the others cannot be applied
// before it. Once it may be the next, it tries again, in a batch.
//
// A delivery whose aggregate has not moved for GapWait is nacked, so that
// a predecessor held by a killed instance, which the broker delivers again
// after its own timeout, gets its turn (4 GapWaits while its subscription
// has a free slot: slots.go); and one whose aggregate has waited longer
// than GapWait already is nacked after a short pause, when its
// subscription has no free slot, so that a predecessor that may be long in
// coming does not take the slot from other aggregates' events. A gap the
// aggregate has waited on longer than MaxGap (whatever the deliveries and
// instances) is an event that never comes: the waiting event goes to the
// dead letters and the aggregate is held at the missing one. An aggregate
// the consumer has applied nothing of starts at its lowest waiting event
// after StartAfter instead.

// gapPauses are the pauses of a delivery waiting for its turn between two
// looks at the position: from min, doubling up to max; behind when an
// earlier event of its aggregate waits here too (turns.go): woken when
// that one is applied or stops waiting, it looks itself only after that.
// Tests lengthen them (a wake must not wait for a look).
type gapPauses struct{ min, max, behind time.Duration }

var defaultGapPauses = gapPauses{min: 5 * time.Millisecond, max: 200 * time.Millisecond, behind: 2 * time.Second}

// gapWait is one delivery's wait for its turn.
type gapWait struct {
	since time.Time // when this delivery began to wait
	moved time.Time // when it last saw its aggregate's position move (or began to wait)
	want  int64     // the seq the position wanted then
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

// waitTurn waits until m may be its aggregate's next event, and returns
// nil to try it again; a *missingError when the gap is older than MaxGap,
// and another error when the delivery is to be nacked. Between two looks
// at the position (a read without a lock), it pauses until it is woken: an
// event of the aggregate was applied, here or in another instance
// (wake.go).
func (s *Set) waitTurn(ctx context.Context, w *gapWait, m events.Meta, gap *OutOfOrderError) error {
	if w.since.IsZero() {
		w.since, w.pause = time.Now(), s.cfg.gapPauses.min
		w.moved = w.since
		s.cfg.Metrics.WaitedForTurn(m.Consumer)
	}
	s.wake.hold()
	defer s.wake.release()
	tw := s.turns.join(m)
	defer tw.leave()
	defer s.stalls.waitBegins(m, s.cfg.GapWait)()
	t := &turnWait{s: s, w: w, m: m, tw: tw, gap: gap}
	for {
		woken, lowest := tw.next()
		s.checkStall(m, t.gap.Want)
		if fullWindow(ctx) && tw.shed(s.cfg.GapWait) {
			s.cfg.Metrics.ShedTurn(m.Consumer)
			return &turnNack{later: true, err: fmt.Errorf("consumer: %q: event %s (seq %d of aggregate %s/%s) waited for seq %d while its aggregate "+
				"did not move for %s and its subscription's window was full; nacked, to come again later, so that earlier events get in",
				m.Consumer, m.EventID, m.AggregateSeq, m.AggregateType, m.AggregateID, t.gap.Want, s.cfg.GapWait)}
		}
		if mv := tw.moved(); mv.last+1 > t.gap.Want {
			t.gap.Want = mv.last + 1 // what the last wake here told
			if mv.told {
				t.gap.Mark = mv.mark
			}
		}
		var done, look bool
		var err error
		if s.turns.covered(m, t.gap.Want) {
			look, done, err = t.waitHere(ctx, woken, lowest)
		} else if done, err = t.markAndJudge(ctx, lowest); !done {
			look, done, err = t.pause(ctx, woken, lowest)
		}
		if done {
			return err
		}
		if look {
			if done, err := t.look(ctx); done {
				return err
			}
		}
	}
}

// turnWait is a delivery's wait in waitTurn: the position as it last saw
// it (gap), and its place among the set's waiters of the aggregate (tw).
// Each step says whether the wait is done (and with what: nil to try the
// event again) and whether to look at the position before the next.
type turnWait struct {
	s   *Set
	w   *gapWait
	m   events.Meta
	tw  *turnWaiter
	gap *OutOfOrderError
}

// waitHere is the wait of an event all of whose predecessors are in this
// instance: it waits for them without a look at the position, and goes
// with those after them, in a batch, once one is applied. The lowest
// waiter looks at the position after a pause without a wake.
func (t *turnWait) waitHere(ctx context.Context, woken <-chan struct{}, lowest bool) (look, done bool, err error) {
	s, m := t.s, t.m
	select {
	case <-ctx.Done():
		return false, true, fmt.Errorf("consumer: %q stopped while event %s waited for seq %d of its aggregate: %w", m.Consumer, m.EventID, t.gap.Want, ctx.Err())
	case <-woken:
		if mv := t.tw.moved(); s.batch == nil && mv.last+1 < m.AggregateSeq {
			// An earlier event applied here, not this one's predecessor:
			// alone, it would only find the gap again (each of a run's
			// waiters, at each commit). In batches, it goes to be parked
			// with its run.
			return false, false, nil
		}
		return false, true, nil
	case <-time.After(s.cfg.gapPauses.max):
		t.w.moved = time.Now()    // not a wait on another instance
		return lowest, false, nil // the lowest looks for them all
	}
}

// markAndJudge marks the position for the instance that moves it to wake
// this one, and decides whether the wait has lasted too long: the
// aggregate started at its lowest waiting event (StartAfter), the missing
// event set aside (MaxGap), or the delivery nacked (GapWait).
func (t *turnWait) markAndJudge(ctx context.Context, lowest bool) (done bool, err error) {
	s, m, w := t.s, t.m, t.w
	// The lowest waiting here marks the position (the others are woken
	// with it), unless an earlier event marked it (a move that clears that
	// mark wakes this one).
	if lowest && (t.gap.Mark == 0 || t.gap.Mark > m.AggregateSeq) {
		err := s.onPositions(ctx, func(ctx context.Context, db dialect.ExecQuerier, tables Tables) (err error) {
			t.gap, err = ordering.NoteWaiting(ctx, db, tables, m)
			return err
		})
		if err != nil || t.gap == nil {
			return true, err // nil: applied meanwhile, before the mark (no one woke it), or held
		}
	}
	gap := t.gap
	if gap.Want > w.want {
		w.moved, w.want = time.Now(), gap.Want
	}
	// An outage stopped the missing events from being applied: the
	// aggregate waits as long again once the database is back.
	up := s.breaker.upFor()
	if gap.Want == 1 && s.cfg.StartAfter > 0 && gap.Waited >= s.cfg.StartAfter && up >= s.cfg.StartAfter {
		return true, s.startAggregate(ctx, m, gap)
	}
	if gap.Want == 1 && s.cfg.StartAfter > 0 && gap.Waited >= s.cfg.GapWait {
		s.sayStartWait(m, gap)
	}
	if gap.Waited >= s.cfg.MaxGap && up >= s.cfg.MaxGap {
		return true, &missingError{gap: gap}
	}
	// A gap older than GapWait is not one another instance is about to
	// fill: after a pause (so that a broker that redelivers at once does
	// not spin), the member goes to other aggregates' events. Not on a
	// subscription with slots: a full window sheds its higher waiting
	// events instead (waitTurn), and keeps the next one, which may be
	// about to go.
	long := gap.Waited >= s.cfg.GapWait && !freeSlot(ctx) && !slotted(ctx)
	if long {
		w.pause = s.cfg.gapPauses.max
	}
	if long && time.Since(w.since) >= s.cfg.gapPauses.max || time.Since(w.moved) >= s.gapWait(ctx) {
		return true, &turnNack{later: !lowest, err: fmt.Errorf("consumer: %q: event %s (seq %d of aggregate %s/%s) waited %s in this delivery for seq %d; nacked, to come again",
			m.Consumer, m.EventID, m.AggregateSeq, m.AggregateType, m.AggregateID, s.cfg.GapWait, gap.Want)}
	}
	return false, nil
}

// pause waits for a wake or the end of a pause (longer each time), then
// says whether to look at the position: a wake that tells it is this
// event's turn ends the wait, and one whose notification told where the
// position is spares the look.
func (t *turnWait) pause(ctx context.Context, woken <-chan struct{}, lowest bool) (look, done bool, err error) {
	s, m, w := t.s, t.m, t.w
	pause := w.pause
	if !lowest {
		pause = s.cfg.gapPauses.behind
	}
	select {
	case <-ctx.Done():
		return false, true, fmt.Errorf("consumer: %q stopped while event %s waited for seq %d of its aggregate: %w", m.Consumer, m.EventID, t.gap.Want, ctx.Err())
	case <-time.After(pause):
		w.pause = min(2*w.pause, s.cfg.gapPauses.max)
	case <-woken: // an event of the aggregate was applied: maybe the one it waits for
		w.pause, w.moved = s.cfg.gapPauses.min, time.Now()
		if _, lowest := t.tw.next(); !lowest {
			return false, false, nil // the lowest looks
		}
		mv := t.tw.moved()
		switch {
		case mv.last+1 >= m.AggregateSeq:
			return false, true, nil // its turn
		case mv.told && mv.last+1 > t.gap.Want:
			// Another instance's notification told where the position
			// is, and its mark: no need to look.
			t.gap.Want, t.gap.Mark, t.gap.Waited = mv.last+1, mv.mark, 0
			return false, false, nil
		}
	}
	return true, false, nil
}

// look reads the position; done (with nil) when there is no gap any more.
func (t *turnWait) look(ctx context.Context) (done bool, err error) {
	err = t.s.onPositions(ctx, func(ctx context.Context, db dialect.ExecQuerier, tables Tables) (err error) {
		t.gap, err = ordering.LookAtPosition(ctx, db, tables, t.m)
		return err
	})
	return err != nil || t.gap == nil, err
}

// turnNack is a delivery nacked after it waited for its aggregate's turn:
// normal flow, not a failure. AddToRouter logs it at debug level. One that
// is not its aggregate's lowest waiting here (later) asks the broker to
// deliver it again after GapWait, not at once (events.MetaNackDelay), so
// that it does not take the slot its predecessor needs; the lowest comes
// again at once: it may be next.
type turnNack struct {
	err   error
	later bool
}

func (e *turnNack) Error() string { return e.err.Error() }
func (e *turnNack) Unwrap() error { return e.err }

// nackLater asks the broker, through msg's metadata, to deliver msg again
// after GapWait when err is a turnNack, and returns err.
func (s *Set) nackLater(ctx context.Context, msg *message.Message, err error) error {
	var later *turnNack
	if errors.As(err, &later) && later.later && ctx.Err() == nil {
		msg.Metadata.Set(events.MetaNackDelay, s.cfg.GapWait.String())
	}
	return err
}

// lookForGap returns the gap m waits on, an *OutOfOrderError, or nil when
// it may be its aggregate's next (or the look failed: the try tells).
func (s *Set) lookForGap(ctx context.Context, m events.Meta) error {
	var gap *OutOfOrderError
	err := s.onPositions(ctx, func(ctx context.Context, db dialect.ExecQuerier, t Tables) (err error) {
		gap, err = ordering.LookAtPosition(ctx, db, t, m)
		return err
	})
	if err != nil || gap == nil {
		return nil
	}
	return gap
}

// ordering.StartAggregate starts m's aggregate at its lowest waiting event, which
// waited StartAfter for the earlier ones: the consumer never got them. It
// returns nil, for m to try again at once (started here or by another
// delivery).
func (s *Set) startAggregate(ctx context.Context, m events.Meta, gap *OutOfOrderError) error {
	var at int64
	err := s.onPositions(ctx, func(ctx context.Context, db dialect.ExecQuerier, t Tables) (err error) {
		at, err = ordering.StartAggregate(ctx, db, t, m, s.cfg.StartAfter)
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
	return nil
}

// sayStartWait says once per consumer and topic, at info, that an
// aggregate the consumer has applied nothing of waits StartAfter for its
// first events (a stream whose start is gone, a subscription made after
// them), so that the wait and its redeliveries are not silent.
func (s *Set) sayStartWait(m events.Meta, gap *OutOfOrderError) {
	if _, said := s.startWaits.LoadOrStore(m.Consumer+"\x00"+m.Topic, true); said {
		return
	}
	s.cfg.Logger.Info(fmt.Sprintf("consumer %s has applied nothing of aggregate %s/%s on %s and its first events have not come: "+
		"it waits StartAfter (%s) for them, then starts each such aggregate at its lowest waiting event "+
		"(said once per consumer and topic; the deliveries waiting meanwhile are nacked and come again)",
		m.Consumer, m.AggregateType, m.AggregateID, m.Topic, s.cfg.StartAfter), map[string]any{
		"consumer": m.Consumer, "topic": m.Topic, "aggregate_type": m.AggregateType, "aggregate_id": m.AggregateID,
		"waiting_seq": m.AggregateSeq, "waited": gap.Waited.String(), "start_after": s.cfg.StartAfter.String()})
}

// onPositions runs f on the consumers' database, outside any handler's
// transaction, in one of the set's slots.
func (s *Set) onPositions(ctx context.Context, f func(context.Context, dialect.ExecQuerier, Tables) error) error {
	release, err := s.own(ctx)
	if err != nil {
		return err
	}
	defer release()
	return f(ctx, s.db, s.tables)
}

// holdOrPass applies the set's dead-letter policy to m's aggregate, for m
// that is in this consumer's dead letters already.
func (s *Set) holdOrPass(m events.Meta) func(context.Context, dialect.ExecQuerier, Tables) error {
	return func(ctx context.Context, db dialect.ExecQuerier, t Tables) error {
		return ordering.InTx(ctx, db, func(ctx context.Context, tx dialect.ExecQuerier) error {
			return ordering.HoldOrPass(ctx, tx, t, m, s.letterOrder())
		})
	}
}

// heldComesBack tells whether the event m's aggregate is held at was
// retried from this consumer's dead letters (`entoutbox dead-letters
// retry`) within MaxGap and is not in them again: it is on its way back,
// and m waits for it rather than going to the dead letters behind it. A
// retry of an aggregate's letters, with consumers running, otherwise sets
// a later event aside anew whenever it comes before the held one is
// applied, and the events after it wait for it in vain.
func (s *Set) heldComesBack(ctx context.Context, m events.Meta, held *HeldError) (bool, error) {
	if held.HeldEventID == uuid.Nil {
		return false, nil
	}
	var back bool
	err := s.onPositions(ctx, func(ctx context.Context, db dialect.ExecQuerier, t Tables) error {
		var rows entsql.Rows
		if err := ordering.On(t, db).Query(ctx, t.DB().RetriedBackQuery(),
			[]any{m.Consumer, held.HeldEventID, s.cfg.MaxGap.Seconds()}, &rows); err != nil {
			return fmt.Errorf("consumer: reading whether event %s of %q was retried: %w", held.HeldEventID, m.Consumer, err)
		}
		var err error
		back, err = ordering.ScanBool(&rows)
		return err
	})
	return back, err
}

// waitRelease waits until m's aggregate is no longer held at the seq held
// says (its event, retried, was applied or set aside again), woken by
// this set's applies or after a pause; after GapWait the delivery is
// nacked, to come again.
func (s *Set) waitRelease(ctx context.Context, m events.Meta, held *HeldError) error {
	tw := s.turns.join(m)
	defer tw.leave()
	began := time.Now()
	for {
		woken, _ := tw.next()
		select {
		case <-ctx.Done():
			return fmt.Errorf("consumer: %q stopped while event %s waited for its retried seq %d: %w", m.Consumer, m.EventID, held.HeldSeq, ctx.Err())
		case <-woken:
		case <-time.After(s.cfg.gapPauses.max):
		}
		var still bool
		err := s.onPositions(ctx, func(ctx context.Context, db dialect.ExecQuerier, t Tables) error {
			var rows entsql.Rows
			if err := ordering.On(t, db).Query(ctx, t.DB().HeldAtQuery(),
				[]any{m.Consumer, m.Topic, m.AggregateType, m.AggregateID, held.HeldSeq}, &rows); err != nil {
				return fmt.Errorf("consumer: reading the position of %q on aggregate %s/%s: %w", m.Consumer, m.AggregateType, m.AggregateID, err)
			}
			var err error
			still, err = ordering.ScanBool(&rows)
			return err
		})
		switch {
		case err != nil:
			return err
		case !still:
			return nil
		case time.Since(began) >= s.cfg.GapWait:
			return &turnNack{err: fmt.Errorf("consumer: %q: event %s (seq %d of aggregate %s/%s) waited %s for its retried seq %d; nacked, to come again",
				m.Consumer, m.EventID, m.AggregateSeq, m.AggregateType, m.AggregateID, s.cfg.GapWait, held.HeldSeq)}
		}
	}
}
