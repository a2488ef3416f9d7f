// Command entoutbox runs and inspects the entoutbox relay.
//
//	entoutbox relay  --database-url postgres://... --broker nats://127.0.0.1:4222 --metrics-addr :9090 --log-format json
//	entoutbox status --database-url postgres://...
//
// With --metrics-addr the relay serves /metrics, /healthz and /readyz.
//
// Every flag can also be set through the environment: --database-url is
// ENTOUTBOX_DATABASE_URL (or DATABASE_URL), --broker is ENTOUTBOX_BROKER,
// and so on.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "entoutbox:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "entoutbox",
		Short: "Relay and inspect the transactional outbox of an ent application",
		Long: `entoutbox moves events committed to the outbox table of a PostgreSQL database
to a message broker, at least once and in order per aggregate.

Every flag can also be set through the environment as ENTOUTBOX_<FLAG>, with
dashes as underscores: --database-url is ENTOUTBOX_DATABASE_URL (DATABASE_URL
works too), --broker is ENTOUTBOX_BROKER.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return flagsFromEnv(cmd.Flags())
		},
	}
	root.AddCommand(newRelayCommand(), newStatusCommand(), newCleanupCommand())
	root.AddCommand(newDeadLettersCommand(), newReplayCommand())
	root.AddCommand(newConsoleCommand())
	return root
}

// flagsFromEnv sets each flag left unset on the command line from
// ENTOUTBOX_<NAME>, and --database-url also from DATABASE_URL.
func flagsFromEnv(flags *pflag.FlagSet) error {
	var err error
	flags.VisitAll(func(f *pflag.Flag) {
		if f.Changed || err != nil {
			return
		}
		keys := []string{"ENTOUTBOX_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))}
		if f.Name == "database-url" {
			keys = append(keys, "DATABASE_URL")
		}
		for _, k := range keys {
			if v, ok := os.LookupEnv(k); ok && v != "" {
				if serr := f.Value.Set(v); serr != nil {
					err = fmt.Errorf("environment variable %s: %w", k, serr)
				}
				return
			}
		}
	})
	return err
}

// addDatabaseFlags adds the flags every command needs to find the outbox.
func addDatabaseFlags(cmd *cobra.Command, databaseURL, table *string) {
	cmd.Flags().StringVar(databaseURL, "database-url", "", "PostgreSQL URL of the database holding the outbox (env ENTOUTBOX_DATABASE_URL or DATABASE_URL)")
	cmd.Flags().StringVar(table, "table", "", "outbox table name (default outbox_events)")
}
