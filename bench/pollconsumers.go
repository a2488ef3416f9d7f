package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// The consumer lines of the poll sections (pollpath.go), with
// --consumer-events: the generated handlers and the hand-written Watermill
// handler of the consumer section (consumers.go) on the section's database,
// through the same broker setup as there (the bench's broker URL, default
// settings). Per shape, 10 hot aggregates and --aggregates, a fresh
// database of the section's own gets --consumer-events events, the poll
// relay publishes them to a fresh stream, and each consumer, under a name
// of its own, drains the whole stream, each handled event writing a dedupe
// record and an invoice in one transaction. On SQLite and MySQL the
// generated handlers take one event per transaction (their BatchSize is
// forced to 1) and instances share no partitions, so the consumer
// section's PostgreSQL row to set beside them is the one with
// WithBatchSize(1).

// pollGeneratedName is the label of the generated handlers' lines.
const pollGeneratedName = "generated handlers, 1 instance, default settings (BatchSize forced to 1: 1 event per transaction; no partition sharing)"

// pollConsumerRows is the section's consumer lines: for each shape a line
// per consumer, or one saying why the shape could not run.
func pollConsumerRows(ctx context.Context, e *env, sec pollSection) ([]string, error) {
	var lines []string
	for _, aggregates := range slices.Compact([]int{10, e.cfg.Aggregates}) {
		rows, err := pollConsumerShape(ctx, e, sec, aggregates)
		if ctx.Err() != nil {
			return lines, ctx.Err()
		}
		if err != nil {
			rows = []string{fmt.Sprintf("%s consumer, %d aggregates: n/a (%s)", sec.name, aggregates, firstLine(err))}
		}
		lines = append(lines, rows...)
	}
	return lines, nil
}

// pollConsumerShape publishes --consumer-events events over aggregates
// from a fresh database of the section's, then drains them with each
// consumer in turn, a line each.
func pollConsumerShape(ctx context.Context, e *env, sec pollSection, aggregates int) ([]string, error) {
	n := e.cfg.ConsumerEvents
	d, err := sec.open(ctx)
	if err != nil {
		return nil, err
	}
	defer d.close()
	prefix := pollPrefix(sec)
	defer deleteNATSStream(e.cfg.Broker, prefix+"profiles")
	e.progress("%s: consumers: emitting %d events over %d aggregates, the poll relay publishing them", sec.name, n, aggregates)
	if _, _, err := prefill(ctx, d.client, n, aggregates); err != nil {
		return nil, err
	}
	if err := publishPolled(ctx, e, d, prefix); err != nil {
		return nil, fmt.Errorf("publishing the consumers' backlog: %w", err)
	}
	br, err := broker.Open(ctx, e.cfg.Broker, broker.Options{})
	if err != nil {
		return nil, fmt.Errorf("opening the broker for the consumers: %w", err)
	}
	defer br.Close()
	db := consumerDB{client: d.client, db: d.db, dialect: d.dialect}
	suffix := fmt.Sprintf("_%s_a%d", sec.topic, aggregates) // names the profile files apart
	e.progress("%s: consumers: generated handlers draining %d events", sec.name, n)
	generated := e.generatedRow(ctx, db, br, prefix, n, generatedConsumer+suffix, pollGeneratedName)
	e.progress("%s: consumers: a hand-written Watermill handler draining %d events", sec.name, n)
	hand := e.handWrittenRow(ctx, db, br, prefix+"profiles", n, handWrittenConsumer+suffix)
	return []string{pollConsumerLine(sec.name, d.dialect, aggregates, generated), pollConsumerLine(sec.name, d.dialect, aggregates, hand)}, nil
}

// publishPolled runs the poll relay on d until its outbox holds nothing
// pending.
func publishPolled(ctx context.Context, e *env, d *pollDB, prefix string) error {
	rs, err := startPollRelay(e, d.url, prefix, 0, 1)
	if err != nil {
		return err
	}
	err = waitBacklogEmpty(ctx, d.db, e.cfg.Timeout, rs.failed())
	if rerr := rs.err(); err != nil && rerr != nil {
		err = rerr
	}
	if serr := rs.stop(); err == nil {
		err = serr
	}
	return err
}

// pollConsumerLine is one consumer line: events/s from the first commit to
// the last, as in the consumer table, and the CPU per handled event of
// this process (the consumer, and SQLite, which runs in it), the MariaDB
// server and the broker.
func pollConsumerLine(name string, d outboxdb.Dialect, aggregates int, r consumerResult) string {
	head := fmt.Sprintf("%s consumer, %s, %d aggregates: ", name, r.name, aggregates)
	if r.err != nil {
		return head + "n/a (" + firstLine(r.err) + ")"
	}
	rate := "-"
	if r.rate > 0 {
		rate = thousands(int64(r.rate + 0.5))
	}
	cpu := []string{"consumer " + groupPerEvent(r.cpuFrom, r.cpuTo, "bench", r.events)}
	if d == outboxdb.SQLite {
		cpu[0] = "consumer and SQLite " + groupPerEvent(r.cpuFrom, r.cpuTo, "bench", r.events)
	} else {
		cpu = append(cpu, name+" "+groupPerEvent(r.cpuFrom, r.cpuTo, mysqlServerGroup, r.events))
	}
	cpu = append(cpu, "broker "+groupPerEvent(r.cpuFrom, r.cpuTo, "broker", r.events))
	line := fmt.Sprintf("%s%s events/s (%d events; CPU per event: %s)", head, rate, r.events, strings.Join(cpu, ", "))
	if len(r.notes) > 0 {
		line += "; " + strings.Join(r.notes, "; ")
	}
	return line
}
