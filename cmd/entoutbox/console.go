package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/entoutbox/entoutbox/console"
	"github.com/entoutbox/entoutbox/internal/pgdial"
	"github.com/entoutbox/entoutbox/relay/fleet"
)

func newConsoleCommand() *cobra.Command {
	var (
		databaseURL, addr, token string
		table, deadLetterTable   string
		scheduledTable           string
		databasesFile            string
		registryURL, registryTbl string
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
carrying a CSRF token. --read-only hides and refuses retry and discard.

With --databases-file (the relay fleet's file of tenants) it serves the
tenants: a page of every tenant's pending events, oldest age and dead
letters (or why it could not be read), and each tenant's own pages under
/t/TENANT/. A tenant's pool is opened when its pages are asked for, holds
at most 2 connections, and is closed after 5 minutes without a request.`,
		Example: `  entoutbox console --addr 127.0.0.1:8080
  entoutbox console --addr :8080 --token "$(openssl rand -hex 16)" --read-only
  entoutbox console --databases-file /etc/entoutbox/databases.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := console.ListenCheck(addr, token); err != nil {
				return err
			}
			cfg := console.Config{Table: table, DeadLetterTable: deadLetterTable,
				ScheduledTable: scheduledTable, Token: token,
				ReadOnly: readOnly, Refresh: refresh, LoginAttempts: loginAttempts}
			if databasesFile != "" || registryURL != "" {
				src, closeSource, err := tenantSource(databasesFile, registryURL, registryTbl)
				if err != nil {
					return fmt.Errorf("console: %w", err)
				}
				defer closeSource()
				if err := consoleTenants(cmd.Flags(), src, &cfg); err != nil {
					return err
				}
			} else {
				db, err := openDB(databaseURL)
				if err != nil {
					return err
				}
				defer db.Close()
				if err := checkTables(cmd.Context(), db, table, deadLetterTable); err != nil {
					return err
				}
				cfg.DB = db
			}
			h, err := console.New(cfg)
			if err != nil {
				return err
			}
			return serveConsole(cmd, h, addr)
		},
	}
	addDatabaseFlags(cmd, &databaseURL, &table)
	f := cmd.Flags()
	f.StringVar(&deadLetterTable, "dead-letter-table", "", "dead-letter table name (default outbox_dead_letters)")
	f.StringVar(&scheduledTable, "scheduled-table", "", "scheduled events' table name (default outbox_scheduled_events)")
	f.StringVar(&databasesFile, "databases-file", "", "JSON file of the tenants' databases (the relay's --databases-file): "+
		"serve every tenant, each under /t/TENANT/, instead of --database-url")
	f.StringVar(&registryURL, "registry-database-url", "", "the relay fleet's registry database (its --registry-database-url): "+
		"serve its table's tenants too, as with --databases-file")
	f.StringVar(&registryTbl, "registry-table", "", "the registry table (default "+fleet.DefaultRegistryTable+")")
	f.StringVar(&addr, "addr", "127.0.0.1:8080", "address to serve on; one that is not loopback needs --token")
	f.StringVar(&token, "token", "", "token every request must carry (Bearer, basic auth password, or the login page); env ENTOUTBOX_TOKEN")
	f.BoolVar(&readOnly, "read-only", false, "hide and refuse retry and discard")
	f.IntVar(&loginAttempts, "login-attempts", 10, "failed token attempts a client address may make in a minute (negative: no limit)")
	f.DurationVar(&refresh, "refresh", 5*time.Second, "how often the overview reloads itself (negative: never)")
	return cmd
}

// serveConsole serves h on addr until the command's context ends, then
// shuts the server down.
func serveConsole(cmd *cobra.Command, h http.Handler, addr string) error {
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
}

// consoleTenants makes cfg a console of the tenants of src (the fleet's
// file, registry or both), read again on every request so that the
// console follows them as the fleet does. --database-url
// (ENTOUTBOX_DATABASE_URL) is refused with it.
func consoleTenants(flags *pflag.FlagSet, src fleet.Source, cfg *console.Config) error {
	if err := checkFleetStatus(flags); err != nil {
		return err
	}
	read := func() ([]console.Tenant, error) {
		tenants, err := src.Read(context.Background())
		if err != nil {
			return nil, err
		}
		out := make([]console.Tenant, len(tenants))
		for i, t := range tenants {
			out[i] = console.Tenant{Name: t.Name, DatabaseURL: t.DatabaseURL, Schema: t.Schema}
		}
		return out, nil
	}
	if _, err := read(); err != nil {
		return fmt.Errorf("console: %w", err)
	}
	cfg.Tenants = read
	cfg.Open = func(databaseURL string) (*sql.DB, error) {
		return openDBWith(databaseURL, pgdial.Options{ApplicationName: "entoutbox console"})
	}
	return nil
}
