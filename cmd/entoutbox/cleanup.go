package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/entoutbox/entoutbox/admin"
	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/relay"
)

func newCleanupCommand() *cobra.Command {
	var (
		databaseURL, table, processedTable string
		processedRetention, deliveredRet   time.Duration
		settledRet                         time.Duration
		batch                              int
	)
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Delete old processed-event records and delivered outbox rows, in small batches",
		Long: `cleanup deletes, in batches that never lock a table for long:
  - processed-event records (consumers' dedupe) older than --processed-retention;
    keep them longer than a broker may redeliver an event;
  - outbox rows delivered longer than --delivered-retention ago (0 keeps them);
    rows the wal path delivered (their delivered_at stays empty) when written
    longer ago and recorded as delivered by the WAL relay;
  - dead letters an operator retried or discarded longer than
    --settled-dead-letter-retention ago (0 keeps them; see dead-letters purge).
Undelivered outbox rows and open dead letters are never deleted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// A negative retention would reach into the future and delete
			// every record, however recent.
			if processedRetention < 0 {
				return fmt.Errorf("--processed-retention %s: must not be negative", processedRetention)
			}
			if deliveredRet < 0 {
				return fmt.Errorf("--delivered-retention %s: must not be negative (0 keeps every delivered row)", deliveredRet)
			}
			if settledRet < 0 {
				return fmt.Errorf("--settled-dead-letter-retention %s: must not be negative (0 keeps them all)", settledRet)
			}
			if batch < 0 {
				return fmt.Errorf("--batch-size %d: must not be negative", batch)
			}
			db, err := openDB(databaseURL)
			if err != nil {
				return err
			}
			defer db.Close()
			ctx := cmd.Context()
			n, err := consumer.CleanupProcessed(ctx, db, processedTable, processedRetention, batch)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted %d processed-event records older than %s\n", n, processedRetention)
			if deliveredRet > 0 {
				n, err := relay.CleanupDelivered(ctx, db, table, deliveredRet, batch)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted %d outbox rows delivered more than %s ago\n", n, deliveredRet)
			}
			if settledRet > 0 {
				n, err := admin.PurgeSettled(ctx, db, settledRet, batch)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted %d dead letters retried or discarded more than %s ago\n", n, settledRet)
			}
			return nil
		},
	}
	addDatabaseFlags(cmd, &databaseURL, &table)
	f := cmd.Flags()
	f.StringVar(&processedTable, "processed-table", "", "processed-events table name (default outbox_processed_events)")
	f.DurationVar(&processedRetention, "processed-retention", 7*24*time.Hour, "keep processed-event records this long")
	f.DurationVar(&deliveredRet, "delivered-retention", 0, "keep delivered outbox rows this long; 0 keeps them all")
	f.DurationVar(&settledRet, "settled-dead-letter-retention", 0,
		"keep dead letters this long after they were retried or discarded; 0 keeps them all")
	f.IntVar(&batch, "batch-size", 1000, "rows deleted per statement")
	return cmd
}
