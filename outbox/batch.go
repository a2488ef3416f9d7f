package outbox

import (
	"context"
	stdsql "database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"

	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/sql"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// Batch holds the events emitted in one transaction and writes them
// together, in one statement (per thousand events), when the transaction commits (generated code flushes it from an ent
// commit hook) or when Flush is called. Ten events then cost about what
// one does: one round trip instead of ten.
//
// Events keep their emit order: they are inserted in it, so the relay
// delivers them in it. An event given its own id (events.WithEventID) may
// be a duplicate, which the caller must learn at once: it is written right
// away, after the events held before it, and reported as
// events.ErrDuplicateEventID with the transaction still usable. Events
// with generated ids cannot collide.
//
// Until a flush, held events are not in the table: queries in the same
// transaction do not see them (generated code's Emitted flushes first).
// A Batch ends with its transaction (Close at commit, Discard at
// rollback): then Add, Flush and Cancel fail with ErrTxEnded instead of
// holding an event that no commit would ever write.
//
// A Batch is safe for concurrent use.
type Batch struct {
	drv   dialect.ExecQuerier
	table string
	// seqTable holds the aggregates' counters that number the events
	// (schema.AggregateSequence); "" numbers none.
	seqTable string
	// scheduledTable holds the events scheduled for later
	// (schema.ScheduledEvent); "" refuses them.
	scheduledTable string
	// metrics counts the events written once Committed is called; nil
	// (SetMetrics not called) counts nothing.
	metrics EmitCounter

	// keepIDs is set where the database has no transaction id to find
	// the rows written by (see Wrote): wroteIDs then keeps their event ids.
	keepIDs bool

	mu       sync.Mutex
	held     []Row
	written  map[string]int // events written by name, while metrics is set
	wroteIDs []any
	// ended is set once the transaction commits or rolls back: checked
	// under mu, which every write takes anyway, so it costs Add nothing.
	ended bool
}

// ErrTxEnded is the cause of the error of Emit, Cancel or Flush on a
// transaction that has already committed or rolled back ("outbox: emitting
// order.placed: the transaction has already been committed or rolled
// back"): the event would be in no transaction, so it is refused rather
// than dropped. errors.Is(err, sql.ErrTxDone) holds too, as for ent's own
// calls on that transaction.
var ErrTxEnded error = txEnded{}

type txEnded struct{}

func (txEnded) Error() string { return "the transaction has already been committed or rolled back" }
func (txEnded) Unwrap() error { return stdsql.ErrTxDone }

// maxBatchRows bounds the rows of one INSERT: PostgreSQL takes at most
// 65535 parameters in a statement, and each row has insertColumns.
const maxBatchRows = 1000

// NewBatch returns a Batch writing to table through drv, the driver of an
// ent transaction.
func NewBatch(drv dialect.ExecQuerier, table string) *Batch {
	return NewBatchFor(drv, Tables{Outbox: table})
}

// NewNumberedBatch is NewBatch that also numbers each event in its
// aggregate's order on its topic (aggregate_seq), from the counters in
// seqTable (see InsertNumberedQuery), so that consumers can apply an
// aggregate's events in order with any number of instances.
func NewNumberedBatch(drv dialect.ExecQuerier, table, seqTable string) *Batch {
	return NewBatchFor(drv, Tables{Outbox: table, Sequence: seqTable})
}

// Tables names the tables a Batch writes to: the outbox, and the optional
// ones ("" for none): the aggregates' counters that number the events
// (schema.AggregateSequence) and the events scheduled for later
// (schema.ScheduledEvent).
type Tables struct {
	Outbox, Sequence, Scheduled string
}

// NewBatchFor returns a Batch writing to t's tables through drv, the
// driver of an ent transaction: NewNumberedBatch when t has a Sequence
// table, and events.DeliverAt and DeliverAfter accepted when it has a
// Scheduled one.
func NewBatchFor(drv dialect.ExecQuerier, t Tables) *Batch {
	b := &Batch{drv: drv, table: t.Outbox, seqTable: t.Sequence, scheduledTable: t.Scheduled, metrics: loadEmitCounter()}
	if d, err := tablesFor(drv, outboxdb.Tables{}); err == nil && d.Dialect != outboxdb.Postgres {
		b.keepIDs = true
	}
	return b
}

// Wrote is the condition on the rows of the outbox table, or of the
// scheduled events' table, that holds for those b's transaction wrote:
// what the generated Emitted and Scheduled query. On PostgreSQL, the rows
// of its transaction id (those written without Emit too); elsewhere the
// events b wrote.
func (b *Batch) Wrote(s *sql.Selector) *sql.Predicate {
	if !b.keepIDs {
		return sql.ExprP(s.C("transaction_id") + " = " + outboxdb.ThisTransaction)
	}
	b.mu.Lock()
	ids := slices.Clone(b.wroteIDs)
	b.mu.Unlock()
	if len(ids) == 0 {
		return sql.False()
	}
	return sql.In(s.C("event_id"), ids...)
}

// Add checks ev and holds it until the next flush, or writes it at once
// when cfg gives it an id. The id is chosen here, so cfg.IDTo learns it
// without a write.
//
// Headers the caller did not set are added from ctx: the trace context of
// its span (traceparent, tracestate, with otel.GetTextMapPropagator()),
// and inside a consumer's handler causation_id and correlation_id (see
// events.WithCause).
func (b *Batch) Add(ctx context.Context, ev Event, cfg events.EmitConfig) error {
	cfg.Headers = contextHeaders(ctx, cfg.Headers)
	given := cfg.EventID != uuid.Nil
	if !given {
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("outbox: generating event id: %w", err)
		}
		cfg.EventID = id
	}
	r, err := newRow(ev, cfg)
	if err != nil {
		return err
	}
	if r.Scheduled && b.scheduledTable == "" {
		return &events.ValidationError{Event: ev.Name, Version: ev.Version, Reason: "DeliverAt and DeliverAfter need the " +
			"scheduled events' table: add type ScheduledEvent struct{ schema.ScheduledEvent } to your ent schema, " +
			"run go generate and migrate"}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return fmt.Errorf("outbox: emitting %s: %w", ev.Name, ErrTxEnded)
	}
	if !given {
		b.held = append(b.held, r)
	} else {
		if err := b.flushLocked(ctx); err != nil {
			return err
		}
		if err := b.write(ctx, []Row{r}, true); err != nil {
			return err
		}
		b.wroteLocked([]Row{r})
	}
	if cfg.IDTo != nil {
		*cfg.IDTo = cfg.EventID
	}
	return nil
}

// Flush writes every event held. On an error the events are dropped, and
// the transaction must roll back.
func (b *Batch) Flush(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return fmt.Errorf("outbox: writing the events emitted: %w", ErrTxEnded)
	}
	return b.flushLocked(ctx)
}

// Close writes every event held and ends the Batch: generated code calls
// it from the transaction's commit hook, right before the commit. Ending
// it in the same critical section as the last write leaves no moment in
// which an Add could hold an event that the commit would not carry. On an
// error the transaction must roll back.
func (b *Batch) Close(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return fmt.Errorf("outbox: writing the events emitted: %w", ErrTxEnded)
	}
	b.ended = true
	return b.flushLocked(ctx)
}

// Discard drops the events held and ends the Batch: generated code calls
// it when the transaction rolls back, or on a Batch made for a transaction
// that had already ended (TxDone).
func (b *Batch) Discard() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ended = true
	b.held = nil
	b.written = nil
}

// Cancel is the package's Cancel in the Batch's transaction, after writing
// the events held, so that one emitted earlier in the transaction can be
// cancelled; it fails with ErrTxEnded once the transaction has ended.
func (b *Batch) Cancel(ctx context.Context, id uuid.UUID) (events.CancelResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return 0, fmt.Errorf("outbox: cancelling event %s: %w", id, ErrTxEnded)
	}
	if err := b.flushLocked(ctx); err != nil {
		return 0, err
	}
	return Cancel(ctx, b.drv, b.table, b.scheduledTable, id)
}

// TxDone tells whether tx, the driver of an ent transaction, has already
// committed or rolled back, without a round trip to the database. For
// generated code, which asks once per transaction, when its first event
// makes a Batch: a transaction that ended before would run no commit hook
// to write it. It knows database/sql's transactions, under ent's SQL
// driver and dialect.Debug; of any other it says false.
func TxDone(tx dialect.Tx) bool {
	for {
		switch t := tx.(type) {
		case *dialect.DebugTx:
			tx = t.Tx
		case *entsql.Tx:
			st, ok := t.Tx.(*stdsql.Tx)
			if !ok {
				return false
			}
			// database/sql has no "done" accessor. StmtContext checks the
			// transaction first (ErrTxDone once it ended) and then refuses
			// a statement of no database, before using the connection:
			// neither answer reaches the server.
			return errors.Is(st.StmtContext(context.Background(), new(stdsql.Stmt)).Close(), stdsql.ErrTxDone)
		default:
			return false
		}
	}
}

func (b *Batch) flushLocked(ctx context.Context) error {
	held := b.held
	b.held = nil
	for len(held) > 0 {
		n := min(len(held), maxBatchRows)
		if err := b.write(ctx, held[:n], false); err != nil {
			return err
		}
		b.wroteLocked(held[:n])
		held = held[n:]
	}
	return nil
}

func (b *Batch) wroteLocked(rows []Row) {
	if b.keepIDs {
		for _, r := range rows {
			b.wroteIDs = append(b.wroteIDs, r.EventID.String())
		}
	}
	if b.metrics == nil {
		return
	}
	if b.written == nil {
		b.written = map[string]int{}
	}
	for _, r := range rows {
		b.written[r.Name]++
	}
}

// Committed counts the events written as emitted, in the metrics given to
// SetMetrics: generated code calls it once the transaction committed.
func (b *Batch) Committed() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for name, n := range b.written {
		b.metrics.Emitted(name, n)
	}
	b.written = nil
}

// write inserts rows: those to send now into the outbox, then those
// scheduled for later into the scheduled events, each in their order.
// given says the caller chose the ids: only then may one to send now be
// waiting among the scheduled events (ids the Batch chose are new).
func (b *Batch) write(ctx context.Context, rows []Row, given bool) error {
	now, later := rows, []Row(nil)
	if slices.ContainsFunc(rows, func(r Row) bool { return r.Scheduled }) {
		now = nil
		for _, r := range rows {
			if r.Scheduled {
				later = append(later, r)
			} else {
				now = append(now, r)
			}
		}
	}
	if len(now) > 0 {
		scheduled := ""
		if given {
			scheduled = b.scheduledTable
		}
		if err := insert(ctx, b.drv, b.table, b.seqTable, scheduled, now); err != nil {
			return err
		}
	}
	if len(later) > 0 {
		return insertScheduled(ctx, b.drv, b.table, b.seqTable, b.scheduledTable, later)
	}
	return nil
}
