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
	"errors"
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
	root.AddCommand(
		newRelayCommand(),
		newStatusCommand(),
		newCleanupCommand(),
		newDeadLettersCommand(),
		newReplayCommand(),
		newConsoleCommand(),
	)
	return root
}

// envAnnotation marks a flag set from the environment with the variable's
// name.
const envAnnotation = "entoutbox_env"

// flagsFromEnv sets each flag left unset on the command line from
// ENTOUTBOX_<NAME>, and --database-url also from DATABASE_URL. A flag set
// so counts as given (Changed), as on the command line.
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
				if serr := flags.Set(f.Name, v); serr != nil {
					if inv := (*pflag.InvalidValueError)(nil); errors.As(serr, &inv) {
						serr = inv.Unwrap() // pflag's text names the flag, not the variable
					}
					err = fmt.Errorf("environment variable %s: %w", k, serr)
					return
				}
				err = flags.SetAnnotation(f.Name, envAnnotation, []string{k})
				return
			}
		}
	})
	return err
}

// givenAs names a flag as it was given: "--lease", or
// "ENTOUTBOX_LEASE (--lease)" when it came from the environment.
func givenAs(f *pflag.Flag) string {
	if env := f.Annotations[envAnnotation]; len(env) > 0 {
		return env[0] + " (--" + f.Name + ")"
	}
	return "--" + f.Name
}

// addDatabaseFlags adds the flags every command needs to find the outbox.
func addDatabaseFlags(cmd *cobra.Command, databaseURL, table *string) {
	cmd.Flags().StringVar(databaseURL, "database-url", "", "PostgreSQL URL of the database holding the outbox (env ENTOUTBOX_DATABASE_URL or DATABASE_URL)")
	cmd.Flags().StringVar(table, "table", "", "outbox table name (default outbox_events)")
}
