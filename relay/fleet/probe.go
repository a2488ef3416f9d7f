package fleet

import (
	"context"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/schema"
)

// probeTimeout bounds the reading of one database's parked outboxes.
const probeTimeout = 30 * time.Second

// probeParked reads the outboxes of the parked tenants every
// ProbeInterval and wakes those with work, until ctx ends. The tenants of
// one database (schema-per-tenant) are read together, on one connection
// opened for the probe and closed after it: a parked tenant holds none.
// Config.ProbeConcurrency databases are read at once.
func (f *Fleet) probeParked(ctx context.Context) {
	tick := time.NewTicker(f.cfg.ProbeInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		f.probeRound(ctx, f.parkedByDatabase())
	}
}

// DefaultProbeConcurrency is how many databases the prober reads at once
// when Config.ProbeConcurrency is zero: a round over hundreds of
// databases, each a connection opened and closed, would one at a time
// take many times ProbeInterval, and a parked tenant's first event would
// wait that long; all at once, the server would spend its time starting
// sessions.
const DefaultProbeConcurrency = 4

// probeRound reads each database of parked, Config.ProbeConcurrency at a
// time, and returns once all were read.
func (f *Fleet) probeRound(ctx context.Context, parked map[string][]*runner) {
	room := make(chan struct{}, f.cfg.ProbeConcurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for url, rs := range parked {
		select {
		case <-ctx.Done():
			return
		case room <- struct{}{}:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-room }()
			f.probe(ctx, url, rs)
		}()
	}
}

// parkedByDatabase is the parked tenants, by their database URL.
func (f *Fleet) parkedByDatabase() map[string][]*runner {
	f.mu.Lock()
	defer f.mu.Unlock()
	parked := map[string][]*runner{}
	for _, r := range f.runners {
		if r.status().State == StateParked {
			parked[r.tenant.DatabaseURL] = append(parked[r.tenant.DatabaseURL], r)
		}
	}
	return parked
}

// probe wakes the tenants of rs, all of database url, whose outbox has
// work, or lacks its table; all of them when the database cannot be read,
// so that each relay reports the failure as its own.
func (f *Fleet) probe(ctx context.Context, url string, rs []*runner) {
	schemas := make([]string, len(rs))
	for i, r := range rs {
		schemas[i] = r.tenant.Schema
	}
	work, err := f.readParked(ctx, url, schemas)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		f.logger.Error("Reading the parked tenants' outboxes; waking them", err,
			watermill.LogFields{"tenants": len(rs), "first_tenant": rs[0].tenant.Name})
	}
	for i, r := range rs {
		if err != nil || work[i].Waiting || work[i].Missing {
			r.wakeUp()
		}
	}
}

func (f *Fleet) readParked(ctx context.Context, url string, schemas []string) ([]outboxdb.Work, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	db, err := f.cfg.Open(url)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	return f.tables().ParkedWork(ctx, db, schemas)
}

// tables names the tenants' outbox tables as their relays do.
func (f *Fleet) tables() outboxdb.Tables {
	t := outboxdb.New(f.cfg.Relay.Table, f.cfg.Relay.DeadLetterTable)
	t.Scheduled = cmpOr(f.cfg.Relay.ScheduledTable, schema.ScheduledEventTable)
	return t
}
