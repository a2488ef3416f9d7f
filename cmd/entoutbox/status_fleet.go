package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/entoutbox/entoutbox/admin"
	"github.com/entoutbox/entoutbox/relay/fleet"
)

// With --databases-file, status reads every tenant's outbox of the file
// (the relay fleet's) and prints one line per tenant and a total.

// tenantStatusWait bounds the reading of one tenant's status, so that a
// database that does not answer costs its line, not the whole command.
const tenantStatusWait = 30 * time.Second

// tenantStatus is one tenant's line: its backlog, or why it could not be
// read.
type tenantStatus struct {
	Tenant           string   `json:"tenant"`
	Error            string   `json:"error,omitempty"`
	Pending          int64    `json:"pending"`
	PendingCapped    bool     `json:"pending_capped"`
	OldestPendingAge float64  `json:"oldest_pending_age_seconds"`
	DeadLetters      int64    `json:"dead_letters"`
	HeldAggregates   int64    `json:"held_aggregates"`
	Problems         []string `json:"problems"`
}

// fleetStatusJSON is the JSON of status over a databases file.
type fleetStatusJSON struct {
	Tenants  []tenantStatus `json:"tenants"`
	Total    tenantStatus   `json:"total"`
	Problems []string       `json:"problems"`
}

// checkFleetStatus refuses --database-url (ENTOUTBOX_DATABASE_URL) with
// --databases-file; DATABASE_URL, a platform's variable for every
// program, is ignored.
func checkFleetStatus(flags *pflag.FlagSet) error {
	f := flags.Lookup("database-url")
	if f == nil || !f.Changed || fromGenericDatabaseURL(f) {
		return nil
	}
	return fmt.Errorf("%s cannot go with --databases-file: the databases are the file's; drop one of them", givenAs(f))
}

// runFleet prints the status of every tenant of the databases file, and
// fails naming each tenant over a threshold or not read.
func (o *statusOptions) runFleet(ctx context.Context, out io.Writer) error {
	src, closeSource, err := tenantSource(o.databasesFile, o.registryURL, o.registryTable)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	defer closeSource()
	tenants, err := src.Read(ctx)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	res := fleetStatusJSON{Tenants: make([]tenantStatus, 0, len(tenants)), Problems: []string{}}
	for _, t := range tenants {
		ts := o.readTenant(ctx, t)
		for _, p := range ts.Problems {
			res.Problems = append(res.Problems, "tenant "+t.Name+": "+p)
		}
		res.Tenants = append(res.Tenants, ts)
	}
	res.Total = totalOf(res.Tenants)
	if o.asJSON {
		if err := writeJSON(out, res); err != nil {
			return err
		}
	} else {
		writeFleetStatus(out, res)
	}
	if len(res.Problems) > 0 {
		return errors.New("status: " + strings.Join(res.Problems, "; "))
	}
	return nil
}

// readTenant reads tenant t's status in its database (its schema as
// search_path, as the fleet's relay connects), or the error that stopped
// it: then its one problem.
func (o *statusOptions) readTenant(ctx context.Context, t fleet.Tenant) tenantStatus {
	ts := tenantStatus{Tenant: t.Name, Problems: []string{}}
	st, err := o.readTenantStatus(ctx, t)
	if err != nil {
		ts.Error = err.Error()
		ts.Problems = append(ts.Problems, "not read: "+oneLine(ts.Error, 300))
		return ts
	}
	ts.Pending, ts.PendingCapped, ts.OldestPendingAge = st.Pending, st.PendingCapped, st.Age().Seconds()
	ts.DeadLetters = st.DeadLetters.Open
	for _, h := range st.Held {
		ts.HeldAggregates += h.Count
	}
	ts.Problems = append(ts.Problems, st.Check(o.th)...)
	return ts
}

func (o *statusOptions) readTenantStatus(ctx context.Context, t fleet.Tenant) (admin.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, tenantStatusWait)
	defer cancel()
	db, err := openDB(t.URL())
	if err != nil {
		return admin.Status{}, err
	}
	defer db.Close()
	if err := checkTables(ctx, db, o.table, o.deadLetterTable); err != nil {
		return admin.Status{}, err
	}
	return admin.ReadTablesStatus(ctx, db, admin.Tables{Outbox: o.table, DeadLetters: o.deadLetterTable,
		Scheduled: o.scheduledTable})
}

// totalOf sums the tenants read; its Tenant says how many were.
func totalOf(tenants []tenantStatus) tenantStatus {
	read := 0
	total := tenantStatus{Problems: []string{}}
	for _, ts := range tenants {
		if ts.Error != "" {
			continue
		}
		read++
		total.Pending += ts.Pending
		total.PendingCapped = total.PendingCapped || ts.PendingCapped
		total.OldestPendingAge = max(total.OldestPendingAge, ts.OldestPendingAge)
		total.DeadLetters += ts.DeadLetters
		total.HeldAggregates += ts.HeldAggregates
	}
	total.Tenant = fmt.Sprintf("%d of %d tenants read", read, len(tenants))
	return total
}

func writeFleetStatus(out io.Writer, res fleetStatusJSON) {
	width := len("total")
	for _, ts := range res.Tenants {
		width = max(width, len(ts.Tenant))
	}
	for _, ts := range res.Tenants {
		if ts.Error != "" {
			fmt.Fprintf(out, "%-*s  NOT READ: %s\n", width, ts.Tenant, oneLine(ts.Error, 200))
			continue
		}
		fmt.Fprintf(out, "%-*s  %s", width, ts.Tenant, tenantLine(ts))
		if len(ts.Problems) > 0 {
			fmt.Fprintf(out, "  OVER: %s", strings.Join(ts.Problems, "; "))
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintf(out, "%-*s  %s (%s)\n", width, "total", tenantLine(res.Total), res.Total.Tenant)
}

// tenantLine is the figures of one line.
func tenantLine(ts tenantStatus) string {
	pending := fmt.Sprint(ts.Pending)
	if ts.PendingCapped {
		pending = "at least " + pending
	}
	age := (time.Duration(ts.OldestPendingAge * float64(time.Second))).Round(time.Millisecond)
	return fmt.Sprintf("pending %s, oldest %s, dead letters %d, held aggregates %d", pending, age, ts.DeadLetters, ts.HeldAggregates)
}
