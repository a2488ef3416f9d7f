package main

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/entoutbox/entoutbox/admin"
	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/relay"
	"github.com/entoutbox/entoutbox/relay/fleet"
	"github.com/entoutbox/entoutbox/schema"
)

// cleanupOptions are the cleanup command's flags.
type cleanupOptions struct {
	databaseURL, table, processedTable string
	scheduledTable                     string
	processedRetention, deliveredRet   time.Duration
	settledRet                         time.Duration
	batch                              int
	databasesFile                      string
	registryURL, registryTable         string
}

func newCleanupCommand() *cobra.Command {
	o := &cleanupOptions{}
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Delete old processed-event records and delivered outbox rows, in small batches",
		Long: `cleanup deletes, in batches that never lock a table for long:
  - processed-event records (consumers' dedupe) older than --processed-retention;
    keep them longer than a broker may redeliver an event;
  - outbox rows delivered longer than --delivered-retention ago (0 keeps them);
    rows the wal path delivered (their delivered_at stays empty) when written
    longer ago and recorded as delivered by the WAL relay;
  - scheduled events cancelled longer than --delivered-retention ago, kept
    until then to be seen (entoutbox status, the console);
  - dead letters an operator retried or discarded longer than
    --settled-dead-letter-retention ago (0 keeps them; see dead-letters purge).
Undelivered outbox rows, scheduled events still waiting and open dead
letters are never deleted.

With --databases-file or --registry-database-url (the relay fleet's
tenants) it cleans every tenant's database in turn, its lines prefixed with
the tenant; a tenant that fails is named, the others are cleaned, and the
command exits with status 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.databasesFile != "" || o.registryURL != "" {
				if err := checkFleetStatus(cmd.Flags()); err != nil {
					return err
				}
				return o.runFleet(cmd.Context(), cmd.OutOrStdout())
			}
			return o.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	addDatabaseFlags(cmd, &o.databaseURL, &o.table)
	f := cmd.Flags()
	f.StringVar(&o.processedTable, "processed-table", "", "processed-events table name (default outbox_processed_events)")
	f.DurationVar(&o.processedRetention, "processed-retention", 7*24*time.Hour, "keep processed-event records this long")
	f.DurationVar(&o.deliveredRet, "delivered-retention", 0, "keep delivered outbox rows this long; 0 keeps them all")
	f.DurationVar(&o.settledRet, "settled-dead-letter-retention", 0,
		"keep dead letters this long after they were retried or discarded; 0 keeps them all")
	f.StringVar(&o.scheduledTable, "scheduled-table", "", "scheduled events' table name (default outbox_scheduled_events)")
	f.IntVar(&o.batch, "batch-size", 1000, "rows deleted per statement")
	f.StringVar(&o.databasesFile, "databases-file", "", "the relay fleet's databases file: clean every tenant's database")
	f.StringVar(&o.registryURL, "registry-database-url", "", "the relay fleet's registry database: clean every tenant's database of its table")
	f.StringVar(&o.registryTable, "registry-table", "", "the registry table (default "+fleet.DefaultRegistryTable+")")
	return cmd
}

// check refuses a negative retention, which would reach into the future
// and delete every record however recent, and a negative batch size.
func (o *cleanupOptions) check() error {
	switch {
	case o.processedRetention < 0:
		return fmt.Errorf("--processed-retention %s: must not be negative", o.processedRetention)
	case o.deliveredRet < 0:
		return fmt.Errorf("--delivered-retention %s: must not be negative (0 keeps every delivered row)", o.deliveredRet)
	case o.settledRet < 0:
		return fmt.Errorf("--settled-dead-letter-retention %s: must not be negative (0 keeps them all)", o.settledRet)
	case o.batch < 0:
		return fmt.Errorf("--batch-size %d: must not be negative", o.batch)
	}
	return nil
}

// run deletes what the retentions allow, saying how much to out.
func (o *cleanupOptions) run(ctx context.Context, out io.Writer) error {
	if err := o.check(); err != nil {
		return err
	}
	return o.clean(ctx, o.databaseURL, out)
}

// clean deletes what the retentions allow in the database of databaseURL.
func (o *cleanupOptions) clean(ctx context.Context, databaseURL string, out io.Writer) error {
	db, err := openDB(databaseURL)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := o.checkTables(ctx, db); err != nil {
		return err
	}
	n, err := consumer.CleanupProcessed(ctx, db, o.processedTable, o.processedRetention, o.batch)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "deleted %d processed-event records older than %s\n", n, o.processedRetention)
	if o.deliveredRet > 0 {
		n, err := relay.CleanupDelivered(ctx, db, o.table, o.deliveredRet, o.batch)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "deleted %d outbox rows delivered more than %s ago\n", n, o.deliveredRet)
		n, err = relay.CleanupCancelled(ctx, db, o.scheduledTable, o.deliveredRet, o.batch)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "deleted %d scheduled events cancelled more than %s ago\n", n, o.deliveredRet)
	}
	if o.settledRet > 0 {
		a, err := admin.Open(db, admin.Tables{}) // the default tables, as checkTables reads
		if err != nil {
			return err
		}
		n, err := a.PurgeSettled(ctx, o.settledRet, o.batch)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "deleted %d dead letters retried or discarded more than %s ago\n", n, o.settledRet)
	}
	return nil
}

// checkTables says what to run, as the other commands do, when a table
// this cleanup deletes from does not exist (a database not migrated, or
// the wrong one), rather than a bare "relation does not exist". The
// scheduled events' table is optional: without it there is nothing to
// delete.
func (o *cleanupOptions) checkTables(ctx context.Context, db *sql.DB) error {
	tables := []string{cmp.Or(o.processedTable, schema.ProcessedEventTable)}
	if o.deliveredRet > 0 {
		tables = append(tables, cmp.Or(o.table, schema.OutboxTable))
	}
	if o.settledRet > 0 {
		tables = append(tables, schema.DeadLetterTable)
	}
	for _, table := range tables {
		exists, err := tablesOf(db, "", "").TableExists(ctx, db, table)
		if err != nil {
			return err
		}
		if !exists {
			return fmt.Errorf("table %q does not exist (run the ent migration first: client.Schema.Create)", table)
		}
	}
	return nil
}
