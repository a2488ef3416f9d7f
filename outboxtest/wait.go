package outboxtest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// Outcome is what became of one event at one consumer: handled (its
// handler's transaction committed, with the dedupe record), or set aside
// in the dead letters with the reason.
type Outcome struct {
	// Consumer is the consumer name; empty for an event the relay gave up
	// publishing.
	Consumer    string
	EventID     uuid.UUID
	Event       string // the wire name, "order.paid"
	Version     int
	AggregateID string
	Handled     bool
	// DeadLetter is the reason the event went to the dead letters; empty
	// when it was handled.
	DeadLetter string
	// Attempts is the try the handler succeeded on, or the tries made
	// before the dead letter.
	Attempts int
}

func (o Outcome) String() string {
	what := fmt.Sprintf("%s %s (aggregate %s)", o.Event, o.EventID, o.AggregateID)
	switch {
	case o.Handled:
		return fmt.Sprintf("%s: handled by %q on attempt %d", what, o.Consumer, o.Attempts)
	case o.Consumer == "":
		return fmt.Sprintf("%s: the relay dead-lettered it after %d attempts: %s", what, o.Attempts, o.DeadLetter)
	}
	return fmt.Sprintf("%s: %q dead-lettered it after %d attempts: %s", what, o.Consumer, o.Attempts, o.DeadLetter)
}

// Wait waits until every event committed so far, and every event those
// emit in turn, has settled: published, then handled or dead-lettered by
// each consumer reading its topic (a consumer without a handler for it
// passes it over). It returns the outcomes, in the order the events were
// written, each event's by consumer name. It fails the test when the
// events do not settle within the timeout (DefaultTimeout, or
// WithTimeout's), saying where each one stands, or when the relay or the
// handlers stopped. An event due after the timeout is not waited for: one
// scheduled with events.DeliverAt or DeliverAfter (not cancelled) is
// waited for when it is due before, until the relay has moved it into the
// outbox and it settled.
func (h *Harness) Wait() []Outcome {
	h.t.Helper()
	if h.stop == nil {
		h.t.Fatalf("outboxtest: Wait before Start: nothing relays or handles the events")
	}
	deadline := time.Now().Add(h.timeout)
	for {
		select {
		case <-h.stopped:
			h.t.Fatalf("outboxtest: %v", h.stopErr)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		st, err := h.look(ctx, deadline)
		cancel()
		if err != nil {
			h.t.Fatalf("outboxtest: %v", err)
		}
		if len(st.unsettled) == 0 {
			return st.outcomes
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("outboxtest: after %s, %d of %d events have not settled (been handled or dead-lettered):\n%s",
				h.timeout, len(st.unsettled), st.events, lines(st.unsettled))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// RequireHandled waits for the events to settle (Wait) and fails the test
// when one went to the dead letters, naming it and the reason, or when no
// consumer handled any. It returns the outcomes.
func (h *Harness) RequireHandled() []Outcome {
	h.t.Helper()
	outcomes := h.Wait()
	var letters []string
	handled := 0
	for _, o := range outcomes {
		if o.Handled {
			handled++
		} else {
			letters = append(letters, o.String())
		}
	}
	if len(letters) > 0 {
		h.t.Fatalf("outboxtest: %d of %d events went to the dead letters:\n%s", len(letters), len(outcomes), lines(letters))
	}
	if handled == 0 {
		h.t.Fatalf("outboxtest: no event was handled: %s", h.nothingHandled())
	}
	return outcomes
}

// RequireDeadLettered waits for the events to settle (Wait) and returns
// those that went to the dead letters; it fails the test when none did.
func (h *Harness) RequireDeadLettered() []Outcome {
	h.t.Helper()
	outcomes := h.Wait()
	var letters, handled []Outcome
	for _, o := range outcomes {
		if o.Handled {
			handled = append(handled, o)
		} else {
			letters = append(letters, o)
		}
	}
	if len(letters) == 0 {
		if len(handled) == 0 {
			h.t.Fatalf("outboxtest: no event went to the dead letters, and none was handled: %s", h.nothingHandled())
		}
		h.t.Fatalf("outboxtest: no event went to the dead letters; %d were handled:\n%s", len(handled), lines(strs(handled)))
	}
	return letters
}

// nothingHandled says why no outcome came: no event, or no consumer on
// their topics (a topic prefix the handlers were given, say).
func (h *Harness) nothingHandled() string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, err := h.events(ctx, time.Now())
	if err != nil {
		return err.Error()
	}
	if len(evs) == 0 {
		return "no event was committed to the outbox (did the transaction commit?)"
	}
	topics := map[string]int{}
	for _, e := range evs {
		topics[h.prefix+e.topic]++
	}
	var published []string
	for _, t := range sortedKeys(topics) {
		published = append(published, fmt.Sprintf("%d to %q", topics[t], t))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var read []string
	for _, t := range sortedKeys(h.subscribed) {
		read = append(read, fmt.Sprintf("%q by %s", t, strings.Join(sortedKeys(h.subscribed[t]), ", ")))
	}
	if len(read) == 0 {
		read = []string{"none (no handler set was given to Start)"}
	}
	prefix := "without a topic prefix (or give the harness theirs: WithTopicPrefix)"
	if h.prefix != "" {
		prefix = fmt.Sprintf("with the harness's topic prefix %q", h.prefix)
	}
	return fmt.Sprintf("events published: %s; topics read: %s; the handlers of a consumer reading the topic "+
		"must be registered for the event, %s", strings.Join(published, ", "), strings.Join(read, "; "), prefix)
}

// state is where the events stand.
type state struct {
	events    int
	unsettled []string // why each unsettled event is, one line each
	outcomes  []Outcome
}

// event is an outbox row, a scheduled event due before the deadline, or
// a relay dead letter.
type event struct {
	id          uuid.UUID
	name        string
	version     int
	topic       string
	aggregateID string
	delivered   bool
	attempts    int
	lastError   string
	availableAt time.Time
	relayLetter string    // the reason the relay gave up, for a relay dead letter
	dueAt       time.Time // when a scheduled event is due, until the relay moves it into the outbox
}

func (e event) String() string {
	return fmt.Sprintf("%s %s (aggregate %s)", e.name, e.id, e.aggregateID)
}

// look reads where the events due by deadline stand.
func (h *Harness) look(ctx context.Context, deadline time.Time) (state, error) {
	// The acknowledgements are copied before the outbox is read: a handler
	// acknowledges after its transaction committed, so every event it
	// emitted is then in the read. Read the other way round, a handler
	// finishing in between looks settled while its event is not counted.
	h.mu.Lock()
	acked := maps.Clone(h.acked)
	h.mu.Unlock()
	evs, err := h.events(ctx, deadline)
	if err != nil {
		return state{}, err
	}
	st := state{events: len(evs)}
	var settled []event
	h.mu.Lock()
	for _, e := range evs {
		switch {
		case e.relayLetter != "":
			settled = append(settled, e)
		case !e.dueAt.IsZero():
			st.unsettled = append(st.unsettled, fmt.Sprintf("%s: scheduled for %s, not yet moved into the outbox by the relay",
				e, e.dueAt.UTC().Format(time.RFC3339Nano)))
		case !e.delivered && !h.receivedAny(e):
			st.unsettled = append(st.unsettled, e.String()+": "+notPublished(e))
		default:
			if waits := h.consumersWaiting(e, acked); len(waits) > 0 {
				st.unsettled = append(st.unsettled, waits...)
			} else if !e.delivered {
				st.unsettled = append(st.unsettled, e.String()+": settled by its consumers; the relay has not recorded it as published yet")
			} else {
				settled = append(settled, e)
			}
		}
	}
	h.mu.Unlock()
	if len(st.unsettled) > 0 {
		return st, nil
	}
	st.outcomes, err = h.outcomes(ctx, settled)
	return st, err
}

// receivedAny tells whether a consumer received e: it was published,
// whether or not the relay recorded it yet (on SQLite a handler's
// transaction holds the write lock that record waits for). h.mu is held.
func (h *Harness) receivedAny(e event) bool {
	for c := range h.subscribed[h.prefix+e.topic] {
		if h.received[delivery{consumer: c, eventID: e.id.String()}] > 0 {
			return true
		}
	}
	return false
}

// consumersWaiting says, for each consumer reading e's topic that has not
// acknowledged e, where it stands with it. h.mu is held.
func (h *Harness) consumersWaiting(e event, acked map[delivery]bool) []string {
	var waits []string
	for _, c := range sortedKeys(h.subscribed[h.prefix+e.topic]) {
		d := delivery{consumer: c, eventID: e.id.String()}
		if acked[d] {
			continue
		}
		if n := h.received[d]; n > 0 {
			waits = append(waits, fmt.Sprintf("%s: published; %q received it %s and has not finished it", e, c, times(n)))
		} else {
			waits = append(waits, fmt.Sprintf("%s: published; %q has not received it", e, c))
		}
	}
	return waits
}

func notPublished(e event) string {
	switch {
	case e.attempts > 0:
		return fmt.Sprintf("not published after %s, last error: %s", times(e.attempts), e.lastError)
	case e.availableAt.After(time.Now()):
		return "scheduled for " + e.availableAt.Format(time.RFC3339)
	}
	return "not published yet"
}

// events reads the scheduled events due by deadline and not cancelled,
// the outbox rows due by deadline (or tried already, or delivered), then
// the relay's dead letters, in the order they were written. The scheduled
// events are read first: one the relay moves in between is then read
// twice, unsettled, never missed.
func (h *Harness) events(ctx context.Context, deadline time.Time) ([]event, error) {
	db := outboxdb.BoundSQL(h.db, h.tables.Dialect)
	deadline = deadline.UTC() // as the database's times are
	var evs []event
	if h.scheduled {
		rows, err := db.QueryContext(ctx, outboxdb.OutboxtestScheduledDue.SQL(h.tables), deadline)
		if err != nil {
			return nil, fmt.Errorf("reading the scheduled events: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var e event
			if err := rows.Scan(&e.id, &e.name, &e.version, &e.topic, &e.aggregateID, &e.dueAt); err != nil {
				return nil, fmt.Errorf("reading the scheduled events: %w", err)
			}
			evs = append(evs, e)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("reading the scheduled events: %w", err)
		}
	}
	rows, err := db.QueryContext(ctx, outboxdb.OutboxtestRows.SQL(h.tables), deadline)
	if err != nil {
		return nil, fmt.Errorf("reading the outbox: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var e event
		if err := rows.Scan(&e.id, &e.name, &e.version, &e.topic, &e.aggregateID, &e.delivered, &e.attempts,
			&e.lastError, &e.availableAt); err != nil {
			return nil, fmt.Errorf("reading the outbox: %w", err)
		}
		evs = append(evs, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the outbox: %w", err)
	}
	letters, err := db.QueryContext(ctx, outboxdb.OutboxtestRelayLetters.SQL(h.tables))
	if err != nil {
		return nil, fmt.Errorf("reading the dead letters: %w", err)
	}
	defer letters.Close()
	for letters.Next() {
		var e event
		var id uuid.NullUUID
		if err := letters.Scan(&id, &e.name, &e.version, &e.topic, &e.aggregateID, &e.attempts, &e.relayLetter); err != nil {
			return nil, fmt.Errorf("reading the dead letters: %w", err)
		}
		e.id = id.UUID
		evs = append(evs, e)
	}
	if err := letters.Err(); err != nil {
		return nil, fmt.Errorf("reading the dead letters: %w", err)
	}
	return evs, nil
}

// outcomes reads what each consumer did with the settled events: its
// dedupe record, or its dead letter.
func (h *Harness) outcomes(ctx context.Context, settled []event) ([]Outcome, error) {
	type result struct {
		handled  bool
		reason   string
		attempts int
	}
	results := map[delivery]result{}
	rows, err := h.db.QueryContext(ctx, outboxdb.OutboxtestOutcomes.SQL(h.tables))
	if err != nil {
		return nil, fmt.Errorf("reading the consumers' outcomes: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var consumer string
		var id uuid.UUID
		var r result
		if err := rows.Scan(&consumer, &id, &r.attempts, &r.handled, &r.reason); err != nil {
			return nil, fmt.Errorf("reading the consumers' outcomes: %w", err)
		}
		results[delivery{consumer: consumer, eventID: id.String()}] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the consumers' outcomes: %w", err)
	}
	var out []Outcome
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range settled {
		o := Outcome{EventID: e.id, Event: e.name, Version: e.version, AggregateID: e.aggregateID}
		if e.relayLetter != "" {
			o.DeadLetter, o.Attempts = e.relayLetter, e.attempts
			out = append(out, o)
			continue
		}
		for _, c := range sortedKeys(h.subscribed[h.prefix+e.topic]) {
			r, ok := results[delivery{consumer: c, eventID: e.id.String()}]
			if !ok {
				continue // no handler of c's for it: passed over
			}
			o.Consumer, o.Handled, o.DeadLetter, o.Attempts = c, r.handled, r.reason, r.attempts
			out = append(out, o)
		}
	}
	return out, nil
}

func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// lines indents each of ss on a line of its own, up to 20 of them.
func lines(ss []string) string {
	const most = 20
	more := ""
	if len(ss) > most {
		more = fmt.Sprintf("\n\t... and %d more", len(ss)-most)
		ss = ss[:most]
	}
	return "\t" + strings.Join(ss, "\n\t") + more
}

func strs[T fmt.Stringer](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.String()
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
