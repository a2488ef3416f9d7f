package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/schema"
)

// scheduledLead is how long before its time each event of the lateness
// load is emitted (and committed): long enough that an emitter slowed by a
// busy machine still commits it before it is due, so that what is
// measured is the relay's promotion and delivery, not the emitter.
const scheduledLead = time.Second

// scheduledSpecs are the rows of the scheduled section: the fast path and
// the WAL path, each with no scheduled event waiting and then with waiting
// of them, due days ahead, side by side. Each row drains --events as the
// relay rows do, then measures the lateness of scheduled deliveries.
func scheduledSpecs(waiting int) []rowSpec {
	var out []rowSpec
	for _, r := range []rowSpec{
		{key: "scheduled-fast", name: "entoutbox fast, 1 replica", path: "fast", replicas: 1},
		{key: "scheduled-wal", name: "entoutbox WAL (logical replication)", path: "wal", replicas: 1},
	} {
		r.lateness = true
		w := r
		w.key += "-waiting"
		w.name += fmt.Sprintf(", %s waiting", thousands(int64(waiting)))
		w.waiting = waiting
		out = append(out, r, w)
	}
	return out
}

// fillScheduled inserts n pending scheduled events in one statement, as
// an application would have scheduled them over time: the payload of the
// measured events, over aggregates aggregates, due from one day ahead on,
// a tenth of a second apart (a million span a little over a day), so that
// none becomes due during the run. Vacuumed and analyzed afterwards, as
// autovacuum would have left a table that grew over days.
func (s *sandbox) fillScheduled(ctx context.Context, n, aggregates int) error {
	body, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("encoding the payload: %w", err)
	}
	table := pgsql.QuoteIdent(schema.ScheduledEventTable)
	if _, err := s.db.ExecContext(ctx, `INSERT INTO `+table+`
		(event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, deliver_at, created_at)
		SELECT gen_random_uuid(), 'profile.updated', 1, 'profiles', 'Profile', (g % $2)::text, $1::jsonb,
			now() + interval '1 day' + g * interval '100 milliseconds', now()
		FROM generate_series(1, $3) g`, string(body), aggregates, n); err != nil {
		return fmt.Errorf("inserting %d scheduled events: %w", n, err)
	}
	if _, err := s.db.ExecContext(ctx, `VACUUM ANALYZE `+table); err != nil {
		return fmt.Errorf("vacuuming the scheduled events: %w", err)
	}
	return nil
}

// lateness summarises how long after its time each scheduled event arrived.
type lateness struct {
	stats
	// early counts events received before their time: the promise is
	// none, ever.
	early int
	// emittedLate counts events the emitter committed after their time
	// (it fell behind by more than scheduledLead): their lateness is partly
	// the emitter's.
	emittedLate int
	// unstamped counts events that arrived without a readable
	// outbox_deliver_at header; their lateness is taken from the time they
	// were emitted for. badStamp describes the first unreadable one.
	unstamped int
	badStamp  string
	// promoted is, per event, the time from its deliver_at to the start
	// of the transaction that moved it into the outbox (the outbox row's
	// created_at): the promoter's share of the lateness.
	promoted stats
}

// latenessPhase emits cfg.Rate scheduled events a second for
// cfg.LatencyDuration, each committed scheduledLead before its time, one
// per transaction, waits for them and measures, per event, the time from
// its outbox_deliver_at header (the database's deliver_at) to its arrival.
// The database and this process read the same clock: both run here.
func (e *env) latenessPhase(ctx context.Context, s *sandbox, recv *receiver, rs *relaySet, res *result) lateness {
	cfg := e.cfg
	load := runPaced(ctx, s.client, paced{rate: cfg.Rate, perTx: 1, workers: 16, lead: scheduledLead}, cfg.LatencyDuration, cfg.Aggregates)
	res.emitted += len(load.ids)
	if load.err != nil {
		res.note("lateness: %v", load.err)
	}
	if got := float64(len(load.ids)) / load.span.Seconds(); load.span > 0 && got < 0.95*float64(cfg.Rate) {
		res.note("lateness: emitter reached only %.0f events/s", got)
	}
	missing := recv.await(ctx, load.ids, cfg.Timeout, rs.failed())
	if missing > 0 && rs.err() == nil && ctx.Err() == nil {
		res.note("lateness: %d of %d events missing after %s", missing, len(load.ids), cfg.Timeout)
	}
	l := latenessOf(load, recv)
	var err error
	if l.promoted, err = s.promotionDelays(ctx); err != nil {
		res.note("lateness: %v", err)
	}
	if l.emittedLate > 0 {
		res.note("lateness: %d events committed after their time (the emitter fell behind by over %s)", l.emittedLate, scheduledLead)
	}
	if l.unstamped > 0 {
		res.note("lateness: %d events arrived without the outbox_deliver_at header", l.unstamped)
	}
	if l.badStamp != "" {
		res.note("lateness: %s", l.badStamp)
	}
	return l
}

// latenessOf measures each event of load that recv received against the
// time it was due: its outbox_deliver_at header, or, without one, the
// time it was emitted for.
func latenessOf(load *pacedLoad, recv *receiver) lateness {
	var l lateness
	ds := make([]time.Duration, 0, len(load.ids))
	for _, id := range load.ids {
		at, ok := recv.receivedAt(id)
		if !ok {
			continue
		}
		due := load.due[id]
		if h := recv.deliverAtOf(id); h == "" {
			l.unstamped++
		} else if t, err := time.Parse(time.RFC3339Nano, h); err != nil {
			l.unstamped++
			if l.badStamp == "" {
				l.badStamp = fmt.Sprintf("event %s: outbox_deliver_at %q is not an RFC 3339 time", id, h)
			}
		} else {
			due = t
		}
		if load.committed[id].After(due) {
			l.emittedLate++
		}
		d := at.Sub(due)
		if d < 0 {
			l.early++
		}
		ds = append(ds, d)
	}
	l.stats = summarize(ds)
	return l
}

// promotionDelays reads, for every promoted event in the outbox (the
// lateness load's: those waiting are due days ahead), how long after its
// deliver_at its promotion began, by the database's clock.
func (s *sandbox) promotionDelays(ctx context.Context) (stats, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT (extract(epoch FROM created_at - (headers->>$1)::timestamptz) * 1e6)::bigint
		FROM `+pgsql.QuoteIdent(schema.OutboxTable)+` WHERE headers ? $1`, events.MetaDeliverAt)
	if err != nil {
		return stats{}, fmt.Errorf("reading the promotion delays: %w", err)
	}
	defer rows.Close()
	var ds []time.Duration
	for rows.Next() {
		var us int64
		if err := rows.Scan(&us); err != nil {
			return stats{}, fmt.Errorf("reading the promotion delays: %w", err)
		}
		ds = append(ds, time.Duration(us)*time.Microsecond)
	}
	if err := rows.Err(); err != nil {
		return stats{}, fmt.Errorf("reading the promotion delays: %w", err)
	}
	return summarize(ds), nil
}

// printScheduledTable writes the scheduled section's table: the drain and
// memory with and without events waiting, and the lateness.
func printScheduledTable(out io.Writer, results []result) error {
	fmt.Fprintln(out, "scheduled events: the drain with scheduled events waiting (due days ahead), then the lateness of scheduled deliveries at --rate\n"+
		"(late: arrival at the broker - outbox_deliver_at; promoted: the start of the promotion's transaction - deliver_at, by the database's clock):")
	tw := tabwriter.NewWriter(out, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "relay\tdrain ev/s\tpeak RSS\tlate p50\tp99\tmax\tearly\tpromoted p50\tp99\tnotes")
	for _, r := range results {
		if r.err != nil {
			fmt.Fprintf(tw, "%s%s\tn/a (%s)\n", r.name, strings.Repeat("\tn/a", 8), firstLine(r.err))
			continue
		}
		drain, rss := r.drainCell(), r.rssCell()
		early := "-"
		if r.late.n > 0 {
			early = thousands(int64(r.late.early))
		}
		p := r.late.promoted
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.name, drain, rss,
			fmtLate(r.late.p50, r.late.n), fmtLate(r.late.p99, r.late.n), fmtLate(r.late.max, r.late.n), early,
			fmtLate(p.p50, p.n), fmtLate(p.p99, p.n), strings.Join(r.notes, "; "))
	}
	return tw.Flush()
}

// fmtLate is fmtDur for a lateness, which is negative for an event that
// arrived early.
func fmtLate(d time.Duration, n int) string {
	if d < 0 && n > 0 {
		return "-" + fmtDur(-d, n)
	}
	return fmtDur(d, n)
}

// splitScheduled separates the scheduled section's rows from the relay
// rows, each in run order.
func splitScheduled(results []result) (relays, scheduled []result) {
	for _, r := range results {
		if r.lateness {
			scheduled = append(scheduled, r)
		} else {
			relays = append(relays, r)
		}
	}
	return relays, scheduled
}
