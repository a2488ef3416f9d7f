package admin

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/entoutbox/entoutbox/internal/lag"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// Status is the state of an outbox at one time.
type Status struct {
	At time.Time `json:"at"` // when it was read
	// Pending counts the events not yet delivered, up to
	// outboxdb.DefaultMaxRows: there PendingCapped is set, and there are
	// at least that many. OldestPending is when the oldest of those
	// counted was written (zero for none; JSON null). Topics splits them
	// by topic.
	Pending       int64          `json:"pending"`
	PendingCapped bool           `json:"pending_capped"`
	OldestPending time.Time      `json:"oldest_pending"`
	Topics        []TopicBacklog `json:"topics"`
	// Partitions is how many partitions the fast relays share (0 before
	// one ran) and Relays who holds them; on MySQL, the poll relays (of
	// every topic, holding no liveness lock).
	Partitions  int               `json:"partitions"`
	Relays      []RelayShare      `json:"relays"`
	DeadLetters DeadLetterSummary `json:"dead_letters"`
	// WAL is the replication slots of the WAL relays; empty before one
	// ran.
	WAL []WALSlot `json:"wal"`
	// Held is, per consumer name, the aggregates it holds behind a dead
	// letter (schema.ConsumerPosition): their later events wait until the
	// letter is retried. Empty when none is held, or no consumer keeps
	// positions.
	Held []HeldAggregates `json:"held"`
	// Lag is, per consumer name with positions and per topic it has
	// positions on, the events it has not handled yet and the age of the
	// oldest (see ConsumerLag). A consumer that never applied an event has
	// no positions, and no lag here.
	Lag []ConsumerLag `json:"lag"`
	// Scheduled is the events emitted for a later time (events.DeliverAt):
	// waiting, overdue and cancelled.
	Scheduled ScheduledSummary `json:"scheduled"`
	// Database is the database read: "PostgreSQL" or "MySQL" (MariaDB
	// too). NotApplicable names what status shows on PostgreSQL alone and
	// does not read there (the fast path, the WAL relays' slots): empty on
	// PostgreSQL.
	Database      string   `json:"database"`
	NotApplicable []string `json:"not_applicable"`
}

// notOnMySQL is what Status.NotApplicable names on MySQL: the fast and
// WAL paths are PostgreSQL's, and the relay there polls.
var notOnMySQL = []string{"fast relays (the fast path is PostgreSQL's; the poll relays share the outbox here)",
	"wal slots (the WAL path is PostgreSQL's)"}

// ScheduledSummary is the scheduled events' table at one time of the
// database's clock, each count up to outboxdb.DefaultMaxRows (its Capped
// flag set there: at least that many).
type ScheduledSummary struct {
	// Table tells the scheduled events' table exists; without it nothing
	// is scheduled.
	Table bool `json:"table"`
	// Waiting counts the events not yet moved to the outbox and not
	// cancelled, the overdue ones included.
	Waiting       int64 `json:"waiting"`
	WaitingCapped bool  `json:"waiting_capped"`
	// NextDue is when the earliest of them is due (zero for none; JSON
	// null), and NextDueInSeconds how long until then by the database's
	// clock: negative once it is due and not yet moved.
	NextDue          time.Time `json:"next_due"`
	NextDueInSeconds float64   `json:"next_due_in_seconds"`
	// Overdue counts the waiting events already due by the database's
	// clock: the relay moves them to the outbox within moments, so a count
	// above 0 for long tells no relay promotes them (stopped, or stuck).
	// OverdueSeconds is how long the earliest has been due.
	Overdue        int64   `json:"overdue"`
	OverdueCapped  bool    `json:"overdue_capped"`
	OverdueSeconds float64 `json:"overdue_seconds"`
	// Cancelled counts the cancelled events, kept until cleanup removes
	// them with the delivered ones.
	Cancelled       int64 `json:"cancelled"`
	CancelledCapped bool  `json:"cancelled_capped"`
	// Topics splits the waiting events by topic, the earliest due first.
	Topics []ScheduledTopic `json:"topics"`
}

// ScheduledTopic is the waiting scheduled events of one topic.
type ScheduledTopic struct {
	Topic   string    `json:"topic"`
	Waiting int64     `json:"waiting"`
	Overdue int64     `json:"overdue"`
	NextDue time.Time `json:"next_due"`
}

// MarshalJSON writes s with NextDue null when nothing waits.
func (s ScheduledSummary) MarshalJSON() ([]byte, error) {
	type fields ScheduledSummary // without this method
	return json.Marshal(struct {
		fields
		NextDue *time.Time `json:"next_due"`
	}{fields(s), timeOrNil(s.NextDue)})
}

// NextDueIn is how long until the earliest waiting event is due, by the
// database's clock; negative when it is overdue.
func (s ScheduledSummary) NextDueIn() time.Duration {
	return time.Duration(s.NextDueInSeconds * float64(time.Second))
}

// OverdueBy is how long the earliest waiting event has been due.
func (s ScheduledSummary) OverdueBy() time.Duration {
	return time.Duration(s.OverdueSeconds * float64(time.Second))
}

// readScheduled reads the scheduled events of t.
func readScheduled(ctx context.Context, db outboxdb.Querier, t outboxdb.Tables) (ScheduledSummary, error) {
	s, err := outboxdb.ReadScheduled(ctx, db, t, 0)
	if err != nil {
		return ScheduledSummary{}, fmt.Errorf("admin: %w", err)
	}
	sum := ScheduledSummary{Table: s.Exists, Waiting: s.Waiting, WaitingCapped: s.WaitingCapped, NextDue: s.NextDue,
		Overdue: s.Overdue, OverdueCapped: s.OverdueCapped, OverdueSeconds: s.OverdueBy().Seconds(),
		Cancelled: s.Cancelled, CancelledCapped: s.CancelledCapped, Topics: make([]ScheduledTopic, 0, len(s.Topics))}
	if !s.NextDue.IsZero() {
		sum.NextDueInSeconds = s.NextDue.Sub(s.At).Seconds()
	}
	for _, tp := range s.Topics {
		sum.Topics = append(sum.Topics, ScheduledTopic(tp))
	}
	return sum, nil
}

// ConsumerLag is how far one consumer name is behind on one topic.
type ConsumerLag struct {
	Consumer string `json:"consumer"`
	Topic    string `json:"topic"`
	// Events counts the topic's numbered events the consumer has not
	// handled: per aggregate, the number of its last event less the
	// consumer's position (all of them where it has none), events the
	// relay has not sent yet included.
	Events int64 `json:"events"`
	// Located counts those of them found in the outbox (among its newest
	// lag.DefaultMaxRows rows), and Oldest is when the oldest of those
	// was written, zero (JSON null) when none was found. OldestAgeSeconds is its age
	// at At: 0 when nothing is behind, nil when events are behind but
	// none was found (unknown: their rows are gone, or older than those
	// walked), and a lower bound when Located < Events.
	Located          int64     `json:"located"`
	Oldest           time.Time `json:"oldest"`
	OldestAgeSeconds *float64  `json:"oldest_age_seconds"`
}

// MarshalJSON writes l with Oldest null when none was found.
func (l ConsumerLag) MarshalJSON() ([]byte, error) {
	type fields ConsumerLag // without this method
	return json.Marshal(struct {
		fields
		Oldest *time.Time `json:"oldest"`
	}{fields(l), timeOrNil(l.Oldest)})
}

// timeOrNil is t, or nil for the zero time: JSON null rather than year 1.
func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Exact tells whether OldestAgeSeconds is the oldest's age rather than a
// lower bound or unknown.
func (l ConsumerLag) Exact() bool { return l.Located == l.Events }

// HeldAggregates is the aggregates one consumer holds.
type HeldAggregates struct {
	Consumer string `json:"consumer"`
	Count    int64  `json:"count"`
	// Oldest lists the longest held, at most maxHeldListed.
	Oldest []HeldAggregate `json:"oldest"`
}

// HeldAggregate is one aggregate held behind the dead letter of its event
// EventID, number Seq in the aggregate's order on Topic.
type HeldAggregate struct {
	Topic         string    `json:"topic"`
	AggregateType string    `json:"aggregate_type"`
	AggregateID   string    `json:"aggregate_id"`
	Seq           int64     `json:"seq"`
	EventID       string    `json:"event_id"`
	Since         time.Time `json:"since"`
}

// maxHeldListed bounds the held aggregates listed per consumer.
const maxHeldListed = 10

// WALSlot is the replication slot of a WAL relay, as the relays
// registered it (by name, whatever its publication is named).
type WALSlot struct {
	Slot string `json:"slot"`
	// Exists tells the slot is on the server (it may have been dropped),
	// Active that a relay streams it now.
	Exists bool `json:"exists"`
	Active bool `json:"active"`
	// RetainedBytes is the WAL the server keeps for the slot, LagBytes
	// how far its confirmed position is behind the server's WAL.
	RetainedBytes int64 `json:"retained_bytes"`
	LagBytes      int64 `json:"lag_bytes"`
	// WALStatus is the server's word on the retained WAL (reserved,
	// extended, unreserved, lost).
	WALStatus string `json:"wal_status"`
}

// RelayShare is what one fast relay subscription owns.
type RelayShare struct {
	Relay      string    `json:"relay"` // RelayID/instance/subscription
	Topic      string    `json:"topic"` // "" for every topic
	Partitions int       `json:"partitions"`
	LeaseUntil time.Time `json:"lease_until"`
	// Locks tells it runs with a liveness lock, Live that its session
	// holds it, Lapsed that its lease had ended when it was read.
	Locks  bool `json:"locks"`
	Live   bool `json:"live"`
	Lapsed bool `json:"lapsed"`
	// Failing counts the pending rows of its partitions whose last
	// publish failed (see TopicBacklog.Failing): while it is above 0 the
	// relay's publishes of them fail, with LastError.
	Failing       int64  `json:"failing"`
	LastError     string `json:"last_error,omitempty"`
	LastErrorRows int64  `json:"last_error_rows,omitempty"`
}

// MarshalJSON writes st with OldestPending null when nothing is pending.
func (st Status) MarshalJSON() ([]byte, error) {
	type fields Status // without this method
	return json.Marshal(struct {
		fields
		OldestPending *time.Time `json:"oldest_pending"`
	}{fields(st), timeOrNil(st.OldestPending)})
}

// Age is how long the oldest pending event had waited when st was read.
func (st Status) Age() time.Duration {
	if st.OldestPending.IsZero() {
		return 0
	}
	return st.At.Sub(st.OldestPending)
}

// TopicBacklog is the pending events of one topic.
type TopicBacklog struct {
	Topic         string    `json:"topic"`
	Pending       int64     `json:"pending"`
	OldestPending time.Time `json:"oldest_pending"`
	// Failing counts those whose last publish failed: the fast path
	// writes each failure on its row (last_error; a failure in a broker
	// outage too, which does not count as an attempt), and a row it
	// delivers is pending no more. LastError is their most frequent
	// error (told apart with ids and numbers replaced, as dead-letter
	// reasons are), as one of them carries it, and LastErrorRows how many
	// share it. The WAL path records no error on its rows: its failures
	// are in the relay's log and metrics only.
	Failing       int64  `json:"failing"`
	LastError     string `json:"last_error,omitempty"`
	LastErrorRows int64  `json:"last_error_rows,omitempty"`
}

// DeadLetterSummary counts the dead letters, those of each state up to
// outboxdb.DefaultMaxRows (100,000): there its Capped flag is set, and
// there are at least that many.
type DeadLetterSummary struct {
	Open            int64 `json:"open"` // neither retried nor discarded
	OpenCapped      bool  `json:"open_capped"`
	Retried         int64 `json:"retried"`
	RetriedCapped   bool  `json:"retried_capped"`
	Discarded       int64 `json:"discarded"`
	DiscardedCapped bool  `json:"discarded_capped"`
	// The open letters counted by source ("relay" or a consumer name):
	// Sources lists them, "relay" first, then the consumers by name, with
	// how many reasons each has; BySource is the same counts by name.
	Sources  []SourceLetters  `json:"sources"`
	BySource map[string]int64 `json:"by_source"`
	// ByReason counts them by source and reason, with ids, numbers and
	// quoted values in the reasons replaced by placeholders (<uuid>,
	// <id>, <n>, "…"): the letters of one cause are one row, whatever
	// order or event each is about. By source as Sources, most frequent
	// first, at most maxReasons of each source.
	ByReason []ReasonCount `json:"by_reason"`
}

// SourceLetters is how many open letters one source wrote, and with how
// many reasons (told apart as ByReason tells them).
type SourceLetters struct {
	Source  string `json:"source"`
	Open    int64  `json:"open"`
	Reasons int64  `json:"reasons"`
}

// ReasonCount is how many open letters of one source share a reason:
// Reason with its ids, numbers and quoted values replaced by
// placeholders, and Example the newest one's reason as written.
type ReasonCount struct {
	Source  string `json:"source"`
	Reason  string `json:"reason"`
	Example string `json:"example"`
	Count   int64  `json:"count"`
}

// maxReasons bounds the reasons listed of each source, most frequent
// first: a source with many causes does not hide another's.
const maxReasons = 10

// ReadStatus reads the status of the outbox table and its dead-letter
// table (schema.OutboxTable and schema.DeadLetterTable when empty), with
// the scheduled events' table of the default name. It counts at most
// outboxdb.DefaultMaxRows pending events (PendingCapped).
func ReadStatus(ctx context.Context, db *sql.DB, table, deadLetterTable string) (Status, error) {
	return ReadTablesStatus(ctx, db, Tables{Outbox: table, DeadLetters: deadLetterTable})
}

// ReadTablesStatus reads the status of the tables tables names, as
// ReadStatus does, on PostgreSQL or MySQL (MariaDB too; see
// Status.NotApplicable).
func ReadTablesStatus(ctx context.Context, db *sql.DB, tables Tables) (Status, error) {
	t, err := tablesOf(tables)
	if err != nil {
		return Status{}, err
	}
	if t.Dialect = outboxdb.DialectOfDB(db); t.Dialect == outboxdb.SQLite {
		return Status{}, errors.New("admin: the status is read on PostgreSQL and MySQL; on SQLite not yet")
	}
	p, err := outboxdb.ReadPending(ctx, db, t, 0)
	if err != nil {
		return Status{}, fmt.Errorf("admin: %w", err)
	}
	st := Status{At: time.Now(), Pending: p.Count, PendingCapped: p.Capped, OldestPending: p.Oldest,
		Topics: []TopicBacklog{}, Relays: []RelayShare{}, WAL: []WALSlot{},
		Database: t.Dialect.String(), NotApplicable: []string{}}
	if t.Dialect == outboxdb.MySQL {
		st.NotApplicable = append(st.NotApplicable, notOnMySQL...)
	}
	failing, err := outboxdb.ReadFailing(ctx, db, t, 0)
	if err != nil {
		return Status{}, fmt.Errorf("admin: %w", err)
	}
	for _, tp := range p.Topics {
		b := TopicBacklog{Topic: tp.Topic, Pending: tp.Pending, OldestPending: tp.OldestPending}
		for _, f := range failing.Topics {
			if f.Topic == tp.Topic {
				b.Failing, b.LastError, b.LastErrorRows = f.Rows, f.Error, f.ErrorRows
			}
		}
		st.Topics = append(st.Topics, b)
	}
	partitions, shares, err := outboxdb.ReadShares(ctx, db, t)
	if err != nil {
		return Status{}, fmt.Errorf("admin: %w", err)
	}
	st.Partitions = partitions
	for _, s := range shares {
		r := RelayShare{Relay: s.Relay, Topic: s.Topic, Partitions: s.Partitions, LeaseUntil: s.LeaseUntil,
			Locks: s.Locks, Live: s.Live, Lapsed: s.Lapsed}
		for _, f := range failing.Relays {
			if f.Relay == s.Relay && f.Topic == s.Topic {
				r.Failing, r.LastError, r.LastErrorRows = f.Rows, f.Error, f.ErrorRows
			}
		}
		st.Relays = append(st.Relays, r)
	}
	slots, err := outboxdb.ReadSlots(ctx, db, t)
	if err != nil {
		return Status{}, fmt.Errorf("admin: %w", err)
	}
	for _, w := range slots {
		st.WAL = append(st.WAL, WALSlot(w))
	}
	if st.DeadLetters, err = readDeadLetterSummary(ctx, db, t); err != nil {
		return Status{}, err
	}
	if st.Held, err = readHeld(ctx, db, t); err != nil {
		return Status{}, err
	}
	if st.Lag, err = readLag(ctx, db, t.Outbox); err != nil {
		return Status{}, err
	}
	if st.Scheduled, err = readScheduled(ctx, db, t); err != nil {
		return Status{}, err
	}
	return st, nil
}

// readLag reads the consumers' lag (package lag: the count reads every
// aggregate's counter and position).
func readLag(ctx context.Context, db *sql.DB, table string) ([]ConsumerLag, error) {
	r, err := lag.Read(ctx, db, lag.Config{Outbox: table})
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	out := make([]ConsumerLag, 0, len(r.Lags))
	for _, l := range r.Lags {
		c := ConsumerLag{Consumer: l.Consumer, Topic: l.Topic, Events: l.Events, Located: l.Located, Oldest: l.Oldest}
		switch {
		case l.Events == 0:
			c.OldestAgeSeconds = new(float64)
		case l.Located > 0:
			age := max(r.At.Sub(l.Oldest).Seconds(), 0)
			c.OldestAgeSeconds = &age
		}
		out = append(out, c)
	}
	return out, nil
}

// readHeld reads the aggregates each consumer holds, from the positions
// table, when there is one.
func readHeld(ctx context.Context, db *sql.DB, t outboxdb.Tables) ([]HeldAggregates, error) {
	hs, err := outboxdb.ReadHeld(ctx, db, t, maxHeldListed)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	out := make([]HeldAggregates, 0, len(hs))
	for _, h := range hs {
		a := HeldAggregates{Consumer: h.Consumer, Count: h.Count, Oldest: make([]HeldAggregate, 0, len(h.Oldest))}
		for _, o := range h.Oldest {
			a.Oldest = append(a.Oldest, HeldAggregate(o))
		}
		out = append(out, a)
	}
	return out, nil
}

// readDeadLetterSummary counts the dead letters of t, each state up to
// outboxdb.DefaultMaxRows.
func readDeadLetterSummary(ctx context.Context, db *sql.DB, t outboxdb.Tables) (DeadLetterSummary, error) {
	n, err := outboxdb.ReadDeadLetterSummary(ctx, db, t, 0, maxReasons)
	if err != nil {
		return DeadLetterSummary{}, fmt.Errorf("admin: %w", err)
	}
	s := DeadLetterSummary{Open: n.Open, Retried: n.Retried, Discarded: n.Discarded, OpenCapped: n.OpenCapped,
		RetriedCapped: n.RetriedCapped, DiscardedCapped: n.DiscardedCapped,
		Sources: make([]SourceLetters, 0, len(n.BySource)), BySource: make(map[string]int64, len(n.BySource)),
		ByReason: make([]ReasonCount, 0, len(n.ByReason))}
	for _, c := range n.BySource {
		s.Sources = append(s.Sources, SourceLetters{Source: c.Source, Open: c.Count, Reasons: c.Reasons})
		s.BySource[c.Source] = c.Count
	}
	for _, r := range n.ByReason {
		s.ByReason = append(s.ByReason, ReasonCount{Source: r.Source, Reason: r.Reason, Example: r.Example, Count: r.Count})
	}
	return s, nil
}

// Thresholds are the limits Check holds a status to.
type Thresholds struct {
	MaxAge         time.Duration // oldest pending event; 0 for no limit
	MaxDeadLetters int64         // open dead letters; negative for no limit
	// MaxOverdue is how long a scheduled event may stay due without being
	// moved to the outbox; 0 for no limit.
	MaxOverdue time.Duration
}

// Check says, one sentence each, which thresholds st passes; none when it
// is within all of them.
func (st Status) Check(th Thresholds) []string {
	var over []string
	if age := st.Age(); th.MaxAge > 0 && age > th.MaxAge {
		over = append(over, fmt.Sprintf("the oldest pending event has waited %s, more than the maximum age %s",
			age.Round(time.Millisecond), th.MaxAge))
	}
	if th.MaxDeadLetters >= 0 && st.DeadLetters.Open > th.MaxDeadLetters {
		over = append(over, fmt.Sprintf("%d open dead letters, more than the maximum %d",
			st.DeadLetters.Open, th.MaxDeadLetters))
	}
	if by := st.Scheduled.OverdueBy(); th.MaxOverdue > 0 && by > th.MaxOverdue {
		over = append(over, fmt.Sprintf("a scheduled event has been due for %s without being sent, more than the maximum %s "+
			"(%d overdue: is a relay running?)", by.Round(time.Millisecond), th.MaxOverdue, st.Scheduled.Overdue))
	}
	return over
}
