package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/schema"
)

// backlogRow is the fairness row: one fleet process (polling, its
// default) over every tenant, the busy tenant given --fleet-backlog events
// at once before it starts, and the paced load on another tenant while
// that backlog drains. Its latency beside the busy tenant's own row (the
// fleet, polling, with nothing else to do) says what the backlog of one
// tenant costs another.
func (fs *fleetSection) backlogRow(ctx context.Context, name string) (row fleetRow) {
	e := fs.e
	row.name = name
	e.progress("== fleet: %s", name)
	other := fs.dbs.tenants[1]
	db, client, err := fs.dbs.open(other, 16)
	if err != nil {
		row.err = err
		return row
	}
	defer client.Close()
	sb := &sandbox{name: fs.dbs.database(other), url: fs.dbs.url(fs.dbs.database(other)), db: db, client: client}
	if err := fs.busy.backlog(ctx, e.cfg.FleetBacklog); err != nil {
		row.err = err
		return row
	}
	prefix := fs.dbs.prefix + "_b3_"
	recv, err := newReceiver(ctx, e.cfg.Broker, prefix+"profiles")
	if err != nil {
		row.err = err
		return row
	}
	defer recv.close()
	f, err := startFleet(e, fs.dbs, prefix, 1)
	if err != nil {
		row.err = err
		return row
	}
	defer func() {
		if err := f.rs.stop(); err != nil {
			row.notes = append(row.notes, err.Error())
		}
		if logged := f.loggedProblems(); logged != "" {
			row.notes = append(row.notes, logged)
		}
	}()
	if row.wake, err = fs.firstEventOf(ctx, sb, recv, f.rs); err != nil {
		row.err = err
		return row
	}
	start := time.Now()
	fs.loadOn(ctx, sb, &row, recv, f.rs, f.pid(0), f.apps[0])
	left, err := fs.busy.undelivered(ctx)
	if err == nil && left > 0 {
		row.notes = append(row.notes, fmt.Sprintf("%d of the backlog's events still waiting at the load's end", left))
	}
	// Drained before the next rows, which would otherwise relay it.
	for err == nil && left > 0 && ctx.Err() == nil && time.Since(start) < e.cfg.Timeout {
		time.Sleep(100 * time.Millisecond)
		left, err = fs.busy.undelivered(ctx)
	}
	switch {
	case err != nil:
		row.notes = append(row.notes, "backlog not read: "+err.Error())
	case left > 0:
		row.notes = append(row.notes, fmt.Sprintf("the backlog not drained within %s", e.cfg.Timeout))
	default:
		row.notes = append(row.notes, fmt.Sprintf("the backlog drained in %s", time.Since(start).Round(100*time.Millisecond)))
	}
	return row
}

// backlog inserts n undelivered events into the sandbox's outbox, over
// 1,000 aggregates, in one statement.
func (s *sandbox) backlog(ctx context.Context, n int) error {
	body, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("encoding the payload: %w", err)
	}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO `+pgsql.QuoteIdent(schema.OutboxTable)+`
		(event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, created_at, available_at)
		SELECT gen_random_uuid(), 'profile.updated', 1, 'profiles', 'Backlog', (g % 1000)::text, $1::jsonb, now(), now()
		FROM generate_series(1, $2) g`, string(body), n); err != nil {
		return fmt.Errorf("inserting a backlog of %d events: %w", n, err)
	}
	return nil
}

// undelivered counts the sandbox's outbox rows not yet delivered.
func (s *sandbox) undelivered(ctx context.Context) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM `+pgsql.QuoteIdent(schema.OutboxTable)+` WHERE delivered_at IS NULL`).Scan(&n)
	return n, err
}
