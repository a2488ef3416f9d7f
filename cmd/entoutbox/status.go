package main

import (
	"database/sql"
	"errors"
	"fmt"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/spf13/cobra"

	"github.com/entoutbox/entoutbox/relay"
)

func newStatusCommand() *cobra.Command {
	var databaseURL, table, deadLetterTable string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print the outbox backlog (pending events, age of the oldest, dead letters) and the fast relays",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := openDB(databaseURL)
			if err != nil {
				return err
			}
			defer db.Close()
			b, err := relay.ReadBacklog(cmd.Context(), db, table, deadLetterTable)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "pending events:      %d\n", b.Pending)
			if b.Pending > 0 {
				fmt.Fprintf(out, "oldest pending age:  %s (written %s)\n",
					b.Age(time.Now()).Round(time.Millisecond), b.OldestPending.UTC().Format(time.RFC3339))
			} else {
				fmt.Fprintf(out, "oldest pending age:  0s\n")
			}
			fmt.Fprintf(out, "dead letters:        %d\n", b.DeadLetters)
			if b.Partitions > 0 {
				fmt.Fprintf(out, "fast relays:         %d, sharing %d partitions\n", len(b.Relays), b.Partitions)
				for _, r := range b.Relays {
					topic := r.Topic
					if topic == "" {
						topic = "every topic"
					}
					state := "lease until " + r.LeaseUntil.UTC().Format(time.RFC3339)
					switch {
					case r.Lapsed:
						state = fmt.Sprintf("lease lapsed %s ago: stopped renewing; the next relay to rebalance takes them",
							time.Since(r.LeaseUntil).Round(time.Second))
					case r.Locks && !r.Live:
						state += "; not running (its liveness lock is gone): taken over within seconds"
					case !r.Locks:
						state += "; holds no liveness lock (poll-only, or an earlier version): taken over when its lease ends"
					}
					fmt.Fprintf(out, "  %s owns %d (%s), %s\n", r.Relay, r.Partitions, topic, state)
				}
			}
			return nil
		},
	}
	addDatabaseFlags(cmd, &databaseURL, &table)
	cmd.Flags().StringVar(&deadLetterTable, "dead-letter-table", "", "dead-letter table name (default outbox_dead_letters)")
	return cmd
}

func openDB(databaseURL string) (*sql.DB, error) {
	if databaseURL == "" {
		return nil, errors.New("no database: set --database-url or ENTOUTBOX_DATABASE_URL")
	}
	db, err := sql.Open("pgx", databaseURL)
	if err != nil {
		return nil, fmt.Errorf("opening the database: %w", err)
	}
	return db, nil
}
