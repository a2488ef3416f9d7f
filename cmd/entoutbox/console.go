package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/entoutbox/entoutbox/console"
)

func newConsoleCommand() *cobra.Command {
	var (
		databaseURL, addr, token string
		table, deadLetterTable   string
		scheduledTable           string
		readOnly                 bool
		refresh                  time.Duration
		loginAttempts            int
	)
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the web console: backlog, delivery rate, relays, consumers, event search, dead letters",
		Long: `console serves a web console for the outbox on --addr: the backlog per topic
and its age, delivered per second, dead letters by reason, the relays and
consumers; a search for events with each event's story, payload and headers;
the dead letters, with retry and discard (those of "entoutbox dead-letters").

It binds to loopback by default. Any other address needs --token: give it as
"Authorization: Bearer TOKEN", as the password of basic auth, or on the login
page. A client address that gets the token wrong --login-attempts times in
a minute is refused (429) until the minute ends. Every action is a POST
carrying a CSRF token. --read-only hides and refuses retry and discard.`,
		Example: `  entoutbox console --addr 127.0.0.1:8080
  entoutbox console --addr :8080 --token "$(openssl rand -hex 16)" --read-only`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := console.ListenCheck(addr, token); err != nil {
				return err
			}
			db, err := openDB(databaseURL)
			if err != nil {
				return err
			}
			defer db.Close()
			if err := checkTables(cmd.Context(), db, table, deadLetterTable); err != nil {
				return err
			}
			h, err := console.New(console.Config{DB: db, Table: table, DeadLetterTable: deadLetterTable,
				ScheduledTable: scheduledTable, Token: token,
				ReadOnly: readOnly, Refresh: refresh, LoginAttempts: loginAttempts})
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("console: listening on %s: %w", addr, err)
			}
			srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
			fmt.Fprintf(cmd.OutOrStdout(), "entoutbox console on http://%s/\n", ln.Addr())
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ln) }()
			select {
			case err := <-done:
				return fmt.Errorf("console: %w", err)
			case <-cmd.Context().Done():
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("console: shutting down: %w", err)
			}
			return nil
		},
	}
	addDatabaseFlags(cmd, &databaseURL, &table)
	f := cmd.Flags()
	f.StringVar(&deadLetterTable, "dead-letter-table", "", "dead-letter table name (default outbox_dead_letters)")
	f.StringVar(&scheduledTable, "scheduled-table", "", "scheduled events' table name (default outbox_scheduled_events)")
	f.StringVar(&addr, "addr", "127.0.0.1:8080", "address to serve on; one that is not loopback needs --token")
	f.StringVar(&token, "token", "", "token every request must carry (Bearer, basic auth password, or the login page); env ENTOUTBOX_TOKEN")
	f.BoolVar(&readOnly, "read-only", false, "hide and refuse retry and discard")
	f.IntVar(&loginAttempts, "login-attempts", 10, "failed token attempts a client address may make in a minute (negative: no limit)")
	f.DurationVar(&refresh, "refresh", 5*time.Second, "how often the overview reloads itself (negative: never)")
	return cmd
}
