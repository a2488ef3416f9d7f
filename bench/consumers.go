package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/schema"
)

// The consumer section: how fast a backlog already in JetStream is handled,
// each handled event writing one dedupe record and one effect row (an
// invoice) in one transaction, by the generated handlers and by a Watermill
// handler written by hand, beside what the database alone allows for the
// same two inserts. The rows run one after the other in one sandbox, each
// consumer under a consumer name (its group on the broker) of its own, so
// that each reads the whole backlog. The generated and the hand-written
// rows take the database they write to (consumerDB), so that the SQLite
// and MariaDB sections run them too (pollconsumers.go).

// consumerDB is the database a consumer row writes its dedupe records and
// invoices to: the consumer section's PostgreSQL sandbox, or a database of
// a poll section.
type consumerDB struct {
	client  *testent.Client
	db      *sql.DB
	dialect outboxdb.Dialect
}

func (s *sandbox) consumerDB() consumerDB {
	return consumerDB{client: s.client, db: s.db, dialect: outboxdb.Postgres}
}

// consumerResult is one row of the consumer table.
type consumerResult struct {
	name    string
	err     error // the row could not run at all
	events  int   // handled in the measured window
	rate    float64
	process string // the CPU group that did the work: "bench" (this process) or "relay"
	cpuFrom cpuSample
	cpuTo   cpuSample
	notes   []string
}

func (r *consumerResult) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// The consumer names of the rows; each writes its own dedupe records and
// invoices.
const (
	generatedConsumer   = "bench_generated"
	handWrittenConsumer = "bench_handwritten"
)

var (
	insertProcessed = `INSERT INTO ` + pgsql.QuoteIdent(schema.ProcessedEventTable) +
		` (consumer, event_id, event_name, attempts) VALUES ($1, $2, $3, 1) ON CONFLICT (consumer, event_id) DO NOTHING`
	insertInvoice = `INSERT INTO invoices (order_id, amount_cents, currency, consumer) VALUES ($1, $2, $3, $4)`
	// The same two inserts for many events, one statement each: the
	// dedupe records, returning those that were new, then their invoices.
	insertProcessedMany = `INSERT INTO ` + pgsql.QuoteIdent(schema.ProcessedEventTable) +
		` (consumer, event_id, event_name, attempts) SELECT $1, id, $2, 1 FROM unnest($3::uuid[]) AS id` +
		` ON CONFLICT (consumer, event_id) DO NOTHING RETURNING event_id`
	insertInvoiceMany = `INSERT INTO invoices (order_id, amount_cents, currency, consumer)` +
		` SELECT o, a, $3, $4 FROM unnest($1::bigint[], $2::bigint[]) AS t(o, a)`
)

// handWrittenSQL is what a user writes on database d for the two inserts
// of the hand-written handler: the dedupe record, which affects no row
// when the event was handled before, and the invoice.
func handWrittenSQL(d outboxdb.Dialect) (processed, invoice string) {
	const plainInvoice = `INSERT INTO invoices (order_id, amount_cents, currency, consumer) VALUES (?, ?, ?, ?)`
	const columns = ` (consumer, event_id, event_name, attempts) VALUES (?, ?, ?, 1)`
	switch d {
	case outboxdb.SQLite:
		return `INSERT INTO ` + pgsql.QuoteIdent(schema.ProcessedEventTable) + columns +
			` ON CONFLICT (consumer, event_id) DO NOTHING`, plainInvoice
	case outboxdb.MySQL:
		return "INSERT INTO `" + schema.ProcessedEventTable + "`" + columns +
			` ON DUPLICATE KEY UPDATE consumer = consumer`, plainInvoice
	}
	return insertProcessed, insertInvoice
}

// measureConsumers emits the backlog, has the fast relay publish it (the
// reference row), then measures each consumer row. An error means the
// section could not run at all.
func measureConsumers(ctx context.Context, e *env) ([]consumerResult, error) {
	cfg := e.cfg
	s, err := newSandbox(ctx, e)
	if err != nil {
		return nil, err
	}
	defer s.close()
	prefix := s.name + "_"
	topic := prefix + "profiles"
	defer deleteNATSStream(cfg.Broker, topic)

	e.progress("consumers: emitting %d events over %d aggregates with no relay running", cfg.ConsumerEvents, cfg.ConsumerAggregates)
	ids, _, err := prefill(ctx, s.client, cfg.ConsumerEvents, cfg.ConsumerAggregates)
	if err != nil {
		return nil, err
	}
	e.progress("consumers: the fast relay publishes the backlog to %s", topic)
	published, err := e.publishBacklog(ctx, s, prefix, len(ids))
	if err != nil {
		return nil, fmt.Errorf("publishing the consumers' backlog: %w", err)
	}
	results := []consumerResult{published}

	consumed, err := e.consumerRows(ctx, s, prefix, len(ids))
	if err != nil {
		return nil, err
	}
	results = append(results, consumed...)
	floors, err := e.floorRows(ctx, s, ids)
	if err != nil {
		return nil, err
	}
	return append(results, floors...), nil
}

// consumerRows drains the published backlog of n events with each kind of
// consumer in turn, one row each.
func (e *env) consumerRows(ctx context.Context, s *sandbox, prefix string, n int) ([]consumerResult, error) {
	cfg := e.cfg
	topic := prefix + "profiles"
	var results []consumerResult
	br, err := broker.Open(ctx, cfg.Broker, broker.Options{})
	if err != nil {
		return nil, fmt.Errorf("opening the broker for the consumers: %w", err)
	}
	defer br.Close()
	db := s.consumerDB()

	e.progress("consumers: generated handlers draining %d events", n)
	results = append(results, e.generatedRow(ctx, db, br, prefix, n, generatedConsumer,
		"generated handlers, 1 instance, default settings (batches of up to 100 events)"))
	e.progress("consumers: a generated batch handler draining %d events", n)
	results = append(results, e.batchHandlerRow(ctx, db, br, prefix, n, generatedConsumer+"_bulk",
		"generated batch handler (OnProfileUpdatedBatch, one bulk INSERT per batch), default settings"))
	if br.Scheme() == "nats" {
		// One instance with more in flight than the default (128) fills
		// bigger transactions.
		wide, err := broker.Open(ctx, withQuery(cfg.Broker, "max_in_flight", "256"), broker.Options{})
		if err != nil {
			return nil, fmt.Errorf("opening the broker with max_in_flight=256: %w", err)
		}
		e.progress("consumers: generated handlers, max_in_flight=256, draining %d events", n)
		results = append(results, e.generatedRow(ctx, db, wide, prefix, n, generatedConsumer+"_wide",
			"generated handlers, 1 instance, default settings, broker URL ?max_in_flight=256"))
		e.progress("consumers: a generated batch handler, max_in_flight=256, draining %d events", n)
		results = append(results, e.batchHandlerRow(ctx, db, wide, prefix, n, generatedConsumer+"_bulk_wide",
			"generated batch handler (OnProfileUpdatedBatch, one bulk INSERT per batch), broker URL ?max_in_flight=256"))
		_ = wide.Close()
	}
	e.progress("consumers: generated handlers, one event per transaction, draining %d events", n)
	results = append(results, e.generatedRow(ctx, db, br, prefix, n, generatedConsumer+"_alone",
		"generated handlers, 1 instance, 1 event per transaction (WithBatchSize(1))", consumer.WithBatchSize(1)))
	e.progress("consumers: a hand-written Watermill handler draining %d events", n)
	results = append(results, e.handWrittenRow(ctx, db, br, topic, n, handWrittenConsumer))
	return results, nil
}

// floorRows are the floors: the same inserts for the same events, no broker.
func (e *env) floorRows(ctx context.Context, s *sandbox, ids []string) ([]consumerResult, error) {
	cfg := e.cfg
	var results []consumerResult
	uids := make([]uuid.UUID, len(ids))
	for i, id := range ids {
		uids[i] = uuid.MustParse(id)
	}
	floors := []struct {
		name         string
		consumer     string
		conns, perTx int
		multiRow     bool
	}{
		{"the database alone, 1 event per transaction, 1 connection", "bench_floor_1", 1, 1, false},
		{fmt.Sprintf("the database alone, 1 event per transaction, %d connections", cfg.ConsumerConns), "bench_floor_n", cfg.ConsumerConns, 1, false},
		{fmt.Sprintf("the database alone, %d events per transaction, 1 connection", cfg.ConsumerPerTx), "bench_floor_tx", 1, cfg.ConsumerPerTx, false},
		{fmt.Sprintf("the database alone, %d events per transaction in 2 multi-row INSERTs, 1 connection", cfg.ConsumerPerTx), "bench_floor_rows", 1, cfg.ConsumerPerTx, true},
	}
	for _, f := range floors {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		e.progress("consumers: %s", f.name)
		results = append(results, floorRow(ctx, s, f.name, f.consumer, uids, cfg.ConsumerAggregates, f.conns, f.perTx, f.multiRow))
	}
	return results, ctx.Err()
}

// publishBacklog runs one fast relay until the outbox holds nothing
// pending, and reports its rate as the reference row: what the consumers
// are fed at.
func (e *env) publishBacklog(ctx context.Context, s *sandbox, prefix string, n int) (consumerResult, error) {
	res := consumerResult{name: "the relay publishing the backlog (fast path, reference)", process: "relay"}
	start := time.Now()
	rs, err := startRelays(e, s, "", "fast", prefix, 1)
	if err != nil {
		return res, err
	}
	res.cpuFrom = sampleCPU(rs.pids())
	if err := waitBacklogEmpty(ctx, s.db, e.cfg.Timeout, rs.failed()); err != nil {
		if rerr := rs.err(); rerr != nil {
			err = rerr
		}
		_ = rs.stop()
		return res, err
	}
	res.events = n
	res.rate = float64(n) / time.Since(start).Seconds()
	res.cpuTo = sampleCPU(rs.pids())
	if err := rs.stop(); err != nil {
		res.note("%v", err)
	}
	return res, nil
}

// handledClock counts the events whose transaction committed, and when the
// first and the last did.
type handledClock struct {
	want int
	done chan struct{} // closed when want events are counted

	mu          sync.Mutex
	n           int
	first, last time.Time
}

func newHandledClock(want int) *handledClock {
	return &handledClock{want: want, done: make(chan struct{})}
}

func (c *handledClock) committed() { c.committedN(1) }

// committedN counts n events committed at once.
func (c *handledClock) committedN(n int) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		c.first = now
	}
	before := c.n
	c.n += n
	c.last = now
	if before < c.want && c.n >= c.want {
		close(c.done)
	}
}

// rate is events/s from the first commit to the last, and how many there
// were.
func (c *handledClock) rate() (int, float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	span := c.last.Sub(c.first)
	if c.n < 2 || span <= 0 {
		return c.n, 0
	}
	return c.n, float64(c.n-1) / span.Seconds()
}

// generatedRow drains the backlog with the generated handlers, default
// settings, one instance. The count is taken when the handler's
// transaction commits (an ent commit hook), which holds however the
// handler set schedules and batches its deliveries.
func (e *env) generatedRow(ctx context.Context, db consumerDB, br broker.Broker, prefix string, n int, consumerName, name string,
	opts ...consumer.Option) consumerResult {
	res := consumerResult{name: name, process: "bench"}
	clock := newHandledClock(n)
	h := newBenchHandlers(db.client, prefix, opts)
	h.OnProfileUpdated(consumerName, func(ctx context.Context, tx *testent.Tx, ev *testent.ProfileUpdated, m events.Meta) error {
		orderID, err := strconv.ParseInt(m.AggregateID, 10, 64)
		if err != nil {
			return fmt.Errorf("aggregate id %q: %w", m.AggregateID, err)
		}
		tx.OnCommit(func(next testent.Committer) testent.Committer {
			return testent.CommitFunc(func(ctx context.Context, tx *testent.Tx) error {
				if err := next.Commit(ctx, tx); err != nil {
					return err
				}
				clock.committed()
				return nil
			})
		})
		return tx.Invoice.Create().SetOrderID(orderID).SetAmountCents(int64(ev.Score)).
			SetCurrency("EUR").SetConsumer(consumerName).Exec(ctx)
	})
	e.runRouter(ctx, db, &res, clock, consumerName, func(r *message.Router) error {
		return h.AddToRouter(r, br.Subscriber)
	})
	return res
}

// newBenchHandlers is the generated handler set of a row: on client's
// database and the row's topics, quiet, with the row's options.
func newBenchHandlers(client *testent.Client, prefix string, opts []consumer.Option) *testent.OutboxHandlers {
	return testent.NewOutboxHandlers(client, append([]consumer.Option{consumer.WithTopicPrefix(prefix),
		consumer.WithLogger(watermill.NopLogger{})}, opts...)...)
}

// batchHandlerRow is generatedRow with a batch handler: the effects of a
// shared transaction's events in one multi-row INSERT (CreateBulk).
func (e *env) batchHandlerRow(ctx context.Context, db consumerDB, br broker.Broker, prefix string, n int, consumerName, name string,
	opts ...consumer.Option) consumerResult {
	res := consumerResult{name: name, process: "bench"}
	clock := newHandledClock(n)
	h := newBenchHandlers(db.client, prefix, opts)
	var calls, given atomic.Int64
	h.OnProfileUpdatedBatch(consumerName, func(ctx context.Context, tx *testent.Tx, batch []testent.ProfileUpdatedDelivery) error {
		calls.Add(1)
		given.Add(int64(len(batch)))
		orders := make([]int64, len(batch))
		for i, d := range batch {
			id, err := strconv.ParseInt(d.Meta.AggregateID, 10, 64)
			if err != nil {
				return fmt.Errorf("aggregate id %q: %w", d.Meta.AggregateID, err)
			}
			orders[i] = id
		}
		tx.OnCommit(func(next testent.Committer) testent.Committer {
			return testent.CommitFunc(func(ctx context.Context, tx *testent.Tx) error {
				if err := next.Commit(ctx, tx); err != nil {
					return err
				}
				clock.committedN(len(batch))
				return nil
			})
		})
		return tx.Invoice.MapCreateBulk(batch, func(c *testent.InvoiceCreate, i int) {
			c.SetOrderID(orders[i]).SetAmountCents(int64(batch[i].Event.Score)).SetCurrency("EUR").SetConsumer(consumerName)
		}).Exec(ctx)
	})
	e.runRouter(ctx, db, &res, clock, consumerName, func(r *message.Router) error {
		return h.AddToRouter(r, br.Subscriber)
	})
	if n := calls.Load(); n > 0 {
		res.note("%.1f events per call", float64(given.Load())/float64(n))
	}
	return res
}

// handWrittenRow drains the backlog with what a user would write without
// the generator: a Watermill handler, one message at a time, decoding the
// payload and running the same two inserts in one transaction, on db,
// under consumerName.
func (e *env) handWrittenRow(ctx context.Context, db consumerDB, br broker.Broker, topic string, n int, consumerName string) consumerResult {
	res := consumerResult{name: "a hand-written Watermill handler, serial, 1 event per transaction", process: "bench"}
	clock := newHandledClock(n)
	handle := func(msg *message.Message) error {
		id, ev, orderID, err := decodeHandWritten(msg)
		if err != nil {
			return err
		}
		fresh, err := insertHandled(msg.Context(), db.db, db.dialect, consumerName, id, msg.Metadata.Get(events.MetaEventName), orderID, int64(ev.Score))
		if !fresh || err != nil {
			return err // a duplicate is acknowledged
		}
		clock.committed()
		return nil
	}
	e.runRouter(ctx, db, &res, clock, consumerName, func(r *message.Router) error {
		sub, err := br.Subscriber(consumerName)
		if err != nil {
			return err
		}
		if c, ok := sub.(broker.ConcurrentSubscriber); ok {
			c.LimitInFlight(1) // serial: what a Watermill handler gets from most subscribers
		}
		r.AddConsumerHandler(consumerName, topic, sub, handle)
		return nil
	})
	return res
}

// decodeHandWritten reads a message as a hand-written handler does: its
// event id, its payload and its aggregate id.
func decodeHandWritten(msg *message.Message) (id uuid.UUID, ev testent.ProfileUpdated, orderID int64, err error) {
	if id, err = uuid.Parse(msg.UUID); err != nil {
		return id, ev, 0, fmt.Errorf("message UUID %q: %w", msg.UUID, err)
	}
	if err := json.Unmarshal(msg.Payload, &ev); err != nil {
		return id, ev, 0, fmt.Errorf("decoding event %s: %w", id, err)
	}
	if orderID, err = strconv.ParseInt(msg.Metadata.Get(events.MetaAggregateID), 10, 64); err != nil {
		return id, ev, 0, fmt.Errorf("aggregate id of event %s: %w", id, err)
	}
	return id, ev, orderID, nil
}

// insertHandled writes the dedupe record of event id and, when it is new
// (fresh), an invoice, in one transaction on db, a database of dialect d;
// a duplicate writes nothing.
func insertHandled(ctx context.Context, db *sql.DB, d outboxdb.Dialect, consumerName string, id uuid.UUID, eventName string,
	orderID, amount int64) (fresh bool, err error) {
	processed, invoice := handWrittenSQL(d)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	r, err := tx.ExecContext(ctx, processed, consumerName, id, eventName)
	if err != nil {
		return false, err
	}
	if n, err := r.RowsAffected(); err != nil || n == 0 {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, invoice, orderID, amount, "EUR", consumerName); err != nil {
		return false, err
	}
	return true, tx.Commit()
}

// runRouter runs a router with the handlers add puts on it until clock has
// counted every event or the timeout passes, records the rate and the CPU
// into res, and checks the effects the consumer wrote to db.
func (e *env) runRouter(ctx context.Context, db consumerDB, res *consumerResult, clock *handledClock, consumerName string,
	add func(*message.Router) error) {
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 30 * time.Second}, watermill.NopLogger{})
	if err == nil {
		err = add(router)
	}
	if err != nil {
		res.err = err
		return
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Taken before the router starts, so the CPU includes subscribing; the
	// rate counts from the first commit.
	res.cpuFrom = sampleCPU(nil)
	if e.cfg.ConsumerProfile != "" {
		stop, err := startCPUProfile(e.cfg.ConsumerProfile + "." + consumerName + ".pprof")
		if err != nil {
			res.err = err
			return
		}
		defer stop()
	}
	ran := make(chan error, 1)
	go func() { ran <- router.Run(rctx) }()
	timer := time.NewTimer(e.cfg.Timeout)
	defer timer.Stop()
	var runErr error
	stopped := false
	select {
	case <-clock.done:
	case <-timer.C:
	case <-ctx.Done():
	case runErr = <-ran:
		stopped = true
	}
	res.cpuTo = sampleCPU(nil)
	res.events, res.rate = clock.rate()
	cancel()
	if !stopped {
		runErr = <-ran
	}
	if runErr != nil && ctx.Err() == nil {
		res.note("router: %s", firstLine(runErr))
	}
	if res.events < clock.want && ctx.Err() == nil {
		res.note("%d of %d events handled after %s", res.events, clock.want, e.cfg.Timeout)
	}
	res.checkEffects(ctx, db, consumerName)
}

// startCPUProfile profiles this process into path until stop.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// checkEffects notes when the consumer's dedupe records or invoices are
// not one per counted event.
func (r *consumerResult) checkEffects(ctx context.Context, db consumerDB, consumerName string) {
	var records, invoices int
	p1, p2 := "$1", "$2"
	if db.dialect != outboxdb.Postgres {
		p1, p2 = "?", "?"
	}
	err := db.db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM `+schema.ProcessedEventTable+` WHERE consumer = `+p1+`),
		(SELECT count(*) FROM invoices WHERE consumer = `+p2+`)`, consumerName, consumerName).Scan(&records, &invoices)
	switch {
	case err != nil:
		r.note("counting the effects: %v", err)
	case records != r.events || invoices != r.events:
		r.note("%d dedupe records and %d invoices for %d events handled", records, invoices, r.events)
	}
}

// floorRow writes a dedupe record and an invoice for each of ids straight
// to the database, perTx events per transaction on conns connections at
// once: what any consumer of the same effects pays at least.
func floorRow(ctx context.Context, s *sandbox, name, consumerName string, ids []uuid.UUID, aggregates, conns, perTx int, multiRow bool) consumerResult {
	res := consumerResult{name: name, process: "bench"}
	db, err := openWarm(ctx, s.url, conns)
	if err != nil {
		res.err = err
		return res
	}
	defer db.Close()
	write := func(start int) error {
		end := min(start+perTx, len(ids))
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if multiRow {
			err = insertMany(ctx, tx, consumerName, ids[start:end], start, aggregates)
		} else {
			for i := start; i < end && err == nil; i++ {
				err = insertOne(ctx, tx, consumerName, ids[i], i, aggregates)
			}
		}
		if err != nil {
			return err
		}
		return tx.Commit()
	}
	res.cpuFrom = sampleCPU(nil)
	start := time.Now()
	err = inBatches(ctx, len(ids), perTx, conns, write)
	res.rate = float64(len(ids)) / time.Since(start).Seconds()
	res.cpuTo = sampleCPU(nil)
	if err != nil {
		res.err = err
		return res
	}
	res.events = len(ids)
	res.checkEffects(ctx, s.consumerDB(), consumerName)
	return res
}

// openWarm opens a pool of conns connections to url and opens them all, so
// that timing starts with them ready.
func openWarm(ctx context.Context, url string, conns int) (*sql.DB, error) {
	db, err := sql.Open("pgx", withApplicationName(url, benchApplicationName))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	warm := make([]*sql.Conn, conns)
	for i := range warm {
		if warm[i], err = db.Conn(ctx); err != nil {
			db.Close()
			return nil, err
		}
	}
	for _, c := range warm {
		c.Close()
	}
	return db, nil
}

func insertOne(ctx context.Context, tx *sql.Tx, consumerName string, id uuid.UUID, i, aggregates int) error {
	r, err := tx.ExecContext(ctx, insertProcessed, consumerName, id, "profile.updated")
	if err != nil {
		return err
	}
	if fresh, err := r.RowsAffected(); err != nil || fresh == 0 {
		return err
	}
	_, err = tx.ExecContext(ctx, insertInvoice, int64(i%aggregates), int64(payload.Score), "EUR", consumerName)
	return err
}

// insertMany writes the records of ids, the start-th event onwards, in one
// statement, and the invoices of those that were new in another.
func insertMany(ctx context.Context, tx *sql.Tx, consumerName string, ids []uuid.UUID, start, aggregates int) error {
	rows, err := tx.QueryContext(ctx, insertProcessedMany, consumerName, "profile.updated", ids)
	if err != nil {
		return err
	}
	fresh := make(map[uuid.UUID]bool, len(ids))
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		fresh[id] = true
	}
	if err := rows.Err(); err != nil {
		return err
	}
	orders := make([]int64, 0, len(fresh))
	amounts := make([]int64, 0, len(fresh))
	for k, id := range ids {
		if fresh[id] {
			orders = append(orders, int64((start+k)%aggregates))
			amounts = append(amounts, int64(payload.Score))
		}
	}
	_, err = tx.ExecContext(ctx, insertInvoiceMany, orders, amounts, "EUR", consumerName)
	return err
}

// printConsumerTable writes the consumer rows as a second table, then where
// their CPU went.
func printConsumerTable(out io.Writer, cfg config, results []consumerResult) error {
	fmt.Fprintf(out, "\nconsumers: %d events already in JetStream over %d aggregates, payload %dB; each handled event writes a dedupe record and an invoice in one transaction\n",
		cfg.ConsumerEvents, cfg.ConsumerAggregates, payloadSize)
	tw := tabwriter.NewWriter(out, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "consumer\tevents/s\tCPU/event: process\tPostgreSQL\tbroker\tnotes")
	for _, r := range results {
		if r.err != nil {
			fmt.Fprintf(tw, "%s\tn/a\tn/a\tn/a\tn/a\tn/a (%s)\n", r.name, firstLine(r.err))
			continue
		}
		rate := "-"
		if r.rate > 0 {
			rate = thousands(int64(r.rate + 0.5))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s %s\t%s\t%s\t%s\n", r.name, rate,
			processLabel(r.process), groupPerEvent(r.cpuFrom, r.cpuTo, r.process, r.events),
			groupPerEvent(r.cpuFrom, r.cpuTo, "PostgreSQL", r.events), groupPerEvent(r.cpuFrom, r.cpuTo, "broker", r.events),
			strings.Join(r.notes, "; "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	header := false
	for _, r := range results {
		line := cpuPerEvent(r.cpuFrom, r.cpuTo, r.events, runtime.NumCPU())
		if r.err != nil || line == "" {
			continue
		}
		if !header {
			fmt.Fprintln(out, "consumer CPU per handled event, from /proc (bench is this process, which runs the consumers and the floors):")
			header = true
		}
		fmt.Fprintf(out, "  %s: %s\n", r.name, line)
	}
	return nil
}

func processLabel(group string) string {
	if group == "bench" {
		return "consumer"
	}
	return group
}

// withQuery returns rawURL with the query parameter key set to value.
func withQuery(rawURL, key, value string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL // Open says what is wrong with it
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}
