package main

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/internal/testent"
	"github.com/entoutbox/entoutbox/outbox"
	"github.com/entoutbox/entoutbox/schema"
)

// The key-skew table: how the consumers' speed depends on how the events
// spread over aggregates, and what order their effects land in. Each row
// has SkewEvents events over a number of aggregates already in JetStream,
// published straight to a stream of its own as the relay would (event
// name, version, aggregate, created time, publish id, and the aggregate
// seq numbered 1..n per aggregate, an aggregate's events in seq order).
// Two consumers read the whole stream under consumer names of their own,
// one after the other, with 1 or more instances (each a handler set, a
// router, a broker connection and a database pool of its own, in this
// process, sharing the consumer name): the generated handlers (ordered,
// default settings) and a hand-written Watermill handler doing the same
// two inserts with many messages at once and no order. Each effect (an
// invoice) carries its event's seq in amount_cents, read back to count
// inversions and duplicates; redeliveries are counted as the router hands
// each message to the handlers.

// skewInstancePool bounds each instance's database connections: three
// instances and the bench's own pool stay well under a default server's
// 100.
const skewInstancePool = 16

// skewSpec is one row: the events of aggregates, consumed by instances.
type skewSpec struct{ aggregates, instances int }

// skewSpecs orders the rows by aggregates, then instances: each aggregate
// count in aggs with one instance, and those in instanceAggs with each
// count of instances.
func skewSpecs(aggs, instances, instanceAggs []int) []skewSpec {
	all := slices.Concat(aggs, instanceAggs)
	slices.Sort(all)
	all = slices.Compact(all)
	insts := slices.Clone(instances)
	slices.Sort(insts)
	insts = slices.Compact(insts)
	var specs []skewSpec
	for _, a := range all {
		one := slices.Contains(aggs, a)
		if one {
			specs = append(specs, skewSpec{a, 1})
		}
		if slices.Contains(instanceAggs, a) {
			for _, i := range insts {
				if i != 1 || !one {
					specs = append(specs, skewSpec{a, i})
				}
			}
		}
	}
	return specs
}

// skewSide is what one consumer did in a row.
type skewSide struct {
	err          error // it could not run at all
	handled      int   // counted at commit in the measured window
	rate         float64
	low, high    float64       // the range of the rates, over rounds
	cpu, pgCPU   time.Duration // the machine's busy time per event, and PostgreSQL's share
	effects      skewEffects
	redeliveries int64   // deliveries with events.MetaDeliveryCount > 1
	split        []int64 // events each instance committed, with more than one
	notes        []string
}

func (s *skewSide) note(format string, args ...any) {
	s.notes = append(s.notes, fmt.Sprintf(format, args...))
}

// skewEffects is what a consumer left in the database, read back.
type skewEffects struct {
	records    int // dedupe records
	effects    int // invoices
	distinct   int // events with an invoice
	inversions int // invoices written after one of a later seq of their aggregate
	duplicates int // invoices beyond the first of their event
}

// skewResult is one row of the key-skew table.
type skewResult struct {
	skewSpec
	events             int
	err                error // the row could not run at all
	ordered, unordered skewSide
}

// measureSkew runs every row of the key-skew table in one sandbox: per
// aggregate count, one fresh stream, then each of its rows. An error
// means the table could not run at all.
func measureSkew(ctx context.Context, e *env) ([]skewResult, error) {
	cfg := e.cfg
	s, err := newSandbox(ctx, e)
	if err != nil {
		return nil, err
	}
	defer s.close()
	br, err := broker.Open(ctx, cfg.Broker, broker.Options{})
	if err != nil {
		return nil, fmt.Errorf("opening the broker for the key-skew table: %w", err)
	}
	defer br.Close()

	var results []skewResult
	specs := skewSpecs(cfg.SkewAggregates, cfg.SkewInstances, cfg.SkewInstanceAggregates)
	for i := 0; i < len(specs); {
		aggs := specs[i].aggregates
		j := i
		for j < len(specs) && specs[j].aggregates == aggs {
			j++
		}
		prefix := fmt.Sprintf("%s_a%d_", s.name, aggs)
		topic := prefix + "profiles"
		e.progress("key skew: publishing %d events over %d aggregates to %s", cfg.SkewEvents, aggs, topic)
		perr := publishSkewed(ctx, br, topic, cfg.SkewEvents, aggs)
		rounds := make([][]skewResult, j-i)
		// The rows of one aggregate count take turns, round after round,
		// so that a spell of load on a busy machine falls on each alike.
		for round := range cfg.SkewRounds {
			for k, spec := range specs[i:j] {
				if ctx.Err() != nil {
					deleteNATSStream(cfg.Broker, topic)
					return nil, ctx.Err()
				}
				r := skewResult{skewSpec: spec, events: cfg.SkewEvents, err: perr}
				if perr == nil {
					r = e.skewRow(ctx, s, prefix, spec, round)
				}
				rounds[k] = append(rounds[k], r)
			}
		}
		for _, rs := range rounds {
			results = append(results, mergeRounds(rs))
		}
		deleteNATSStream(cfg.Broker, topic)
		i = j
	}
	return results, ctx.Err()
}

// skewRow runs the ordered consumer, then the unordered one, on the
// stream under prefix, under consumer names of the round's own.
func (e *env) skewRow(ctx context.Context, s *sandbox, prefix string, spec skewSpec, round int) skewResult {
	r := skewResult{skewSpec: spec, events: e.cfg.SkewEvents}
	name := fmt.Sprintf("skew_a%d_i%d_r%d", spec.aggregates, spec.instances, round+1)
	e.progress("key skew: generated handlers, %d instance(s), %d aggregates, round %d", spec.instances, spec.aggregates, round+1)
	r.ordered = e.skewSide(ctx, s, prefix, spec.instances, name+"_generated", true)
	e.progress("key skew: a hand-written unordered handler, %d instance(s), %d aggregates, round %d", spec.instances, spec.aggregates, round+1)
	r.unordered = e.skewSide(ctx, s, prefix, spec.instances, name+"_handwritten", false)
	return r
}

// mergeRounds is one row of the table from its rounds: each side's
// median rate, the range, the CPU of the median round, and the faults of
// every round (inversions, duplicates and redeliveries summed).
func mergeRounds(rs []skewResult) skewResult {
	r := rs[0]
	if r.err != nil || len(rs) == 1 {
		return r
	}
	side := func(get func(skewResult) skewSide) skewSide {
		sides := make([]skewSide, len(rs))
		for i, r := range rs {
			sides[i] = get(r)
		}
		return mergeSides(sides)
	}
	r.ordered = side(func(r skewResult) skewSide { return r.ordered })
	r.unordered = side(func(r skewResult) skewSide { return r.unordered })
	return r
}

func mergeSides(sides []skewSide) skewSide {
	for _, s := range sides {
		if s.err != nil {
			return s
		}
	}
	byRate := slices.Clone(sides)
	slices.SortFunc(byRate, func(a, b skewSide) int { return cmp.Compare(a.rate, b.rate) })
	out := byRate[len(byRate)/2]
	out.low, out.high = byRate[0].rate, byRate[len(byRate)-1].rate
	out.notes, out.redeliveries, out.effects.inversions, out.effects.duplicates = nil, 0, 0, 0
	for i, s := range sides {
		out.redeliveries += s.redeliveries
		out.effects.inversions += s.effects.inversions
		out.effects.duplicates += s.effects.duplicates
		for _, n := range s.notes {
			out.notes = append(out.notes, fmt.Sprintf("round %d: %s", i+1, n))
		}
	}
	return out
}

// publishSkewed publishes n events over aggregates to topic: event i is
// aggregate i % aggregates's event i/aggregates + 1. It sends in rounds,
// each holding the next seq of every aggregate and starting once the one
// before is confirmed, so that each aggregate's events are stored in seq
// order (messages in flight together may be stored in any order).
func publishSkewed(ctx context.Context, br broker.Broker, topic string, n, aggregates int) error {
	pub, ok := br.Publisher().(broker.AsyncPublisher)
	if !ok {
		return fmt.Errorf("the %s publisher cannot publish asynchronously", br.Scheme())
	}
	body, err := json.Marshal(&payload)
	if err != nil {
		return fmt.Errorf("encoding the payload: %w", err)
	}
	created := time.Now().UTC().Format(time.RFC3339Nano)
	for start := 0; start < n; start += aggregates {
		if err := ctx.Err(); err != nil {
			return err
		}
		end := min(start+aggregates, n)
		var wg sync.WaitGroup
		errs := make(chan error, end-start)
		for i := start; i < end; i++ {
			id, err := uuid.NewV7()
			if err != nil {
				return fmt.Errorf("generating an event id: %w", err)
			}
			md := outbox.Metadata("profile.updated", 1, "Profile", aggregateID(i, aggregates), nil)
			md[events.MetaCreatedAt] = created
			md[events.MetaPublishID] = outbox.PublishID(id.String(), int64(i+1))
			outbox.SetAggregateSeq(md, int64(i/aggregates+1))
			wg.Add(1)
			pub.PublishAsync(topic, &message.Message{UUID: id.String(), Payload: body, Metadata: md}, func(err error) {
				if err != nil {
					errs <- err
				}
				wg.Done()
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return fmt.Errorf("publishing event %d..%d of %d: %w", start, end, n, err)
		}
	}
	return nil
}

// skewInstance is one instance of a consumer: what a process of its own
// would hold.
type skewInstance struct {
	db      *sql.DB
	br      broker.Broker
	router  *message.Router
	clock   *handledClock // the side's, shared
	handled atomic.Int64  // this instance's
}

// committed counts n events this instance committed.
func (i *skewInstance) committed(n int) {
	i.handled.Add(int64(n))
	i.clock.committedN(n)
}

func (i *skewInstance) close() {
	if i.br != nil {
		_ = i.br.Close()
	}
	if i.db != nil {
		_ = i.db.Close()
	}
}

// skewSide drains the stream under prefix with instances instances of
// consumer name, the generated handlers when ordered, else the
// hand-written handler, until every event was handled or e.cfg.Timeout
// passed, then reads back its effects.
func (e *env) skewSide(ctx context.Context, s *sandbox, prefix string, instances int, name string, ordered bool) skewSide {
	var side skewSide
	n := e.cfg.SkewEvents
	clock := newHandledClock(n)
	var redelivered atomic.Int64
	insts := make([]*skewInstance, 0, instances)
	defer func() {
		for _, in := range insts {
			in.close()
		}
	}()
	for range instances {
		in, err := e.newSkewInstance(ctx, s, prefix, name, ordered, clock, &redelivered)
		if in != nil {
			insts = append(insts, in)
		}
		if err != nil {
			side.err = err
			return side
		}
	}

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cpuFrom := sampleCPU(nil)
	ran := make(chan error, len(insts))
	for _, in := range insts {
		go func() { ran <- in.router.Run(rctx) }()
	}
	timer := time.NewTimer(e.cfg.Timeout)
	defer timer.Stop()
	var runErr error
	stopped := 0
	select {
	case <-clock.done:
	case <-timer.C:
	case <-ctx.Done():
	case runErr = <-ran:
		stopped++
	}
	side.handled, side.rate = clock.rate()
	if cpuTo := sampleCPU(nil); cpuFrom.ok && cpuTo.ok && side.handled > 0 {
		side.cpu = (cpuTo.busy - cpuFrom.busy) / time.Duration(side.handled)
		side.pgCPU = groupCPU(cpuFrom, cpuTo, "PostgreSQL") / time.Duration(side.handled)
	}
	side.redeliveries = redelivered.Load()
	if len(insts) > 1 {
		for _, in := range insts {
			side.split = append(side.split, in.handled.Load())
		}
	}
	cancel()
	for ; stopped < len(insts); stopped++ {
		runErr = errors.Join(runErr, <-ran)
	}
	if runErr != nil && ctx.Err() == nil {
		side.note("router: %s", firstLine(runErr))
	}
	if side.handled < n && ctx.Err() == nil {
		side.note("stopped after --timeout %s", e.cfg.Timeout)
	}
	var err error
	if side.effects, err = readSkewEffects(ctx, s.db, name); err != nil {
		side.note("reading the effects: %v", err)
	}
	if f := side.effects; err == nil && f.distinct != n {
		side.note("%s of %s events applied", thousands(int64(f.distinct)), thousands(int64(n)))
	}
	if f := side.effects; err == nil && f.records != f.distinct {
		side.note("%s dedupe records for %s events applied", thousands(int64(f.records)), thousands(int64(f.distinct)))
	}
	return side
}

// newSkewInstance makes one instance of consumer name: a database pool, a
// broker connection and a router with the consumer's handlers on it. What
// it returns is to be closed even with an error.
func (e *env) newSkewInstance(ctx context.Context, s *sandbox, prefix, name string, ordered bool,
	clock *handledClock, redelivered *atomic.Int64) (*skewInstance, error) {
	in := &skewInstance{clock: clock}
	var err error
	if in.db, err = sql.Open("pgx", withApplicationName(s.url, benchApplicationName)); err != nil {
		return in, err
	}
	in.db.SetMaxOpenConns(skewInstancePool)
	in.db.SetMaxIdleConns(skewInstancePool)
	if in.br, err = broker.Open(ctx, e.cfg.Broker, broker.Options{}); err != nil {
		return in, fmt.Errorf("opening the broker: %w", err)
	}
	if in.router, err = message.NewRouter(message.RouterConfig{CloseTimeout: 30 * time.Second}, watermill.NopLogger{}); err != nil {
		return in, err
	}
	in.router.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			if n, _ := strconv.Atoi(msg.Metadata.Get(events.MetaDeliveryCount)); n > 1 {
				redelivered.Add(1)
			}
			return h(msg)
		}
	})
	if ordered {
		return in, addSkewGenerated(in, prefix, name)
	}
	sub, err := in.br.Subscriber(name)
	if err != nil {
		return in, err
	}
	in.router.AddConsumerHandler(name, prefix+"profiles", sub, skewHandWritten(in, name))
	return in, nil
}

// addSkewGenerated puts the generated handlers on in's router, default
// settings: each event's invoice carries its seq.
func addSkewGenerated(in *skewInstance, prefix, name string) error {
	client := testent.NewClient(testent.Driver(entsql.OpenDB(dialect.Postgres, in.db)))
	h := testent.NewOutboxHandlers(client, consumer.WithTopicPrefix(prefix), consumer.WithLogger(watermill.NopLogger{}))
	h.OnProfileUpdated(name, func(ctx context.Context, tx *testent.Tx, ev *testent.ProfileUpdated, m events.Meta) error {
		orderID, err := strconv.ParseInt(m.AggregateID, 10, 64)
		if err != nil {
			return fmt.Errorf("aggregate id %q: %w", m.AggregateID, err)
		}
		tx.OnCommit(func(next testent.Committer) testent.Committer {
			return testent.CommitFunc(func(ctx context.Context, tx *testent.Tx) error {
				if err := next.Commit(ctx, tx); err != nil {
					return err
				}
				in.committed(1)
				return nil
			})
		})
		return tx.Invoice.Create().SetOrderID(orderID).SetAmountCents(m.AggregateSeq).
			SetCurrency("EUR").SetConsumer(name).Exec(ctx)
	})
	return h.AddToRouter(in.router, in.br.Subscriber)
}

// skewHandWritten is what a user would write without the generator to
// handle many messages at once: a Watermill handler that the router runs
// on each message as the subscriber hands it out (up to its max_in_flight
// at once), the dedupe record and the invoice in one transaction, in no
// particular order.
func skewHandWritten(in *skewInstance, name string) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		id, _, orderID, err := decodeHandWritten(msg)
		if err != nil {
			return err
		}
		seq, err := strconv.ParseInt(msg.Metadata.Get(events.MetaAggregateSeq), 10, 64)
		if err != nil {
			return fmt.Errorf("aggregate seq of event %s: %w", id, err)
		}
		fresh, err := insertHandled(msg.Context(), in.db, outboxdb.Postgres, name, id, msg.Metadata.Get(events.MetaEventName), orderID, seq)
		if !fresh || err != nil {
			return err // a duplicate is acknowledged
		}
		in.committed(1)
		return nil
	}
}

// readSkewEffects reads back what consumer name wrote. Invoices are
// taken in the order they were inserted (their serial id): one whose seq
// is below one inserted before it, of the same aggregate, is an
// inversion.
func readSkewEffects(ctx context.Context, db *sql.DB, name string) (skewEffects, error) {
	var f skewEffects
	err := db.QueryRowContext(ctx, `SELECT
			(SELECT count(*) FROM `+pgsql.QuoteIdent(schema.ProcessedEventTable)+` WHERE consumer = $1),
			count(*), count(DISTINCT (order_id, amount_cents)), count(*) FILTER (WHERE amount_cents < before)
		FROM (SELECT order_id, amount_cents,
				max(amount_cents) OVER (PARTITION BY order_id ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
			FROM invoices WHERE consumer = $1) t`, name).Scan(&f.records, &f.effects, &f.distinct, &f.inversions)
	f.duplicates = f.effects - f.distinct
	return f, err
}

// printSkewTable writes the key-skew table: per row, the ordered and the
// unordered consumer side by side.
func printSkewTable(out io.Writer, cfg config, results []skewResult) error {
	fmt.Fprintf(out, "\nconsumers, key skew: %s events per row already in JetStream (a fresh stream per aggregate count, each aggregate's seq 1..n), payload %dB; "+
		"each handled event writes a dedupe record and an invoice in one transaction. ordered: the generated handlers, default settings; "+
		"unordered: a hand-written Watermill handler, as many messages at once as the subscriber hands out, no order. "+
		"Each instance has its own router, subscriber and %d connections, all in this process. Pairs read ordered / unordered. %s"+
		"CPU/event is the whole machine's busy time per event handled (every process), PostgreSQL's share in brackets\n",
		thousands(int64(cfg.SkewEvents)), payloadSize, skewInstancePool, roundsNote(cfg.SkewRounds))
	tw := tabwriter.NewWriter(out, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "aggregates\tinstances\tordered ev/s\tunordered ev/s\tratio\tCPU/event (PostgreSQL)\tinversions\tduplicates\tredeliveries\tnotes")
	for _, r := range results {
		if r.err != nil {
			fmt.Fprintf(tw, "%s\t%d%s\tn/a (%s)\n", thousands(int64(r.aggregates)), r.instances, strings.Repeat("\tn/a", 7), firstLine(r.err))
			continue
		}
		ratio := "-"
		if r.ordered.rate > 0 && r.unordered.rate > 0 {
			ratio = fmt.Sprintf("%.2fx", r.ordered.rate/r.unordered.rate)
		}
		var notes []string
		if r.events < r.aggregates {
			notes = append(notes, fmt.Sprintf("only %s aggregates have an event", thousands(int64(r.events))))
		}
		for _, side := range []struct {
			name string
			s    skewSide
		}{{"ordered", r.ordered}, {"unordered", r.unordered}} {
			if n := side.s.problems(); len(n) > 0 {
				notes = append(notes, side.name+": "+strings.Join(n, ", "))
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s / %s\t%s\t%s\t%s\t%s\n", thousands(int64(r.aggregates)), r.instances,
			r.ordered.fmtRate(), r.unordered.fmtRate(), ratio, r.ordered.fmtCPU(), r.unordered.fmtCPU(),
			pair(r.ordered, r.unordered, func(s skewSide) int64 { return int64(s.effects.inversions) }),
			pair(r.ordered, r.unordered, func(s skewSide) int64 { return int64(s.effects.duplicates) }),
			pair(r.ordered, r.unordered, func(s skewSide) int64 { return s.redeliveries }),
			strings.Join(notes, "; "))
	}
	return tw.Flush()
}

func roundsNote(rounds int) string {
	if rounds <= 1 {
		return ""
	}
	return fmt.Sprintf("Each row ran %d times, the rows of an aggregate count taking turns: rates are the median (lowest-highest), "+
		"CPU/event the median run's, faults summed over the runs. ", rounds)
}

// problems are how the side's events fell to its instances, then its
// notes (among them what its effects say is wrong: an event without its
// invoice, a dedupe record without one or the reverse).
func (s skewSide) problems() []string {
	if s.err != nil {
		return []string{"n/a (" + firstLine(s.err) + ")"}
	}
	var out []string
	if len(s.split) > 0 {
		parts := make([]string, len(s.split))
		for i, n := range s.split {
			parts[i] = thousands(n)
		}
		out = append(out, "per instance "+strings.Join(parts, "/"))
	}
	return append(out, s.notes...)
}

// fmtRate is the rate, and its range when it is a median of rounds.
func (s skewSide) fmtRate() string {
	switch {
	case s.err != nil:
		return "n/a"
	case s.rate > 0 && s.high > s.low:
		return fmt.Sprintf("%s (%s-%s)", thousands(int64(s.rate+0.5)), thousands(int64(s.low+0.5)), thousands(int64(s.high+0.5)))
	case s.rate > 0:
		return thousands(int64(s.rate + 0.5))
	}
	return "-"
}

// fmtCPU is the machine's CPU per event, PostgreSQL's share in brackets.
func (s skewSide) fmtCPU() string {
	if s.err != nil || s.cpu == 0 {
		return "-"
	}
	return fmt.Sprintf("%dµs (%d)", s.cpu.Microseconds(), s.pgCPU.Microseconds())
}

// pair prints the ordered and the unordered side's count: "0 / 1,234".
func pair(ordered, unordered skewSide, count func(skewSide) int64) string {
	one := func(s skewSide) string {
		if s.err != nil {
			return "n/a"
		}
		return thousands(count(s))
	}
	return one(ordered) + " / " + one(unordered)
}
