package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/spf13/cobra"

	"github.com/entoutbox/entoutbox/admin"
	"github.com/entoutbox/entoutbox/internal/lag"
	"github.com/entoutbox/entoutbox/internal/outboxdb"
	"github.com/entoutbox/entoutbox/internal/pgdial"
	"github.com/entoutbox/entoutbox/mysqldb"
	"github.com/entoutbox/entoutbox/relay/fleet"
	"github.com/entoutbox/entoutbox/sqlitedb"
)

// statusOptions are the status command's flags.
type statusOptions struct {
	databaseURL, table, deadLetterTable string
	scheduledTable, databasesFile       string
	registryURL, registryTable          string
	asJSON                              bool
	th                                  admin.Thresholds
}

func newStatusCommand() *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print the outbox backlog (pending events, age of the oldest, dead letters), consumer lag, the fast relays and the WAL slots",
		Long: `status prints the outbox backlog (pending events, per topic, and the age of the
oldest), the fast relays and the partitions they hold, the WAL relays'
replication slots (active or not, WAL retained), the open dead letters
(neither retried nor discarded) by source and reason, the aggregates
consumers hold behind a dead letter, and each consumer's lag per topic: the
events it has not handled yet and the age of the oldest (consumers whose
positions are in this database; the count reads every aggregate's counter
and position).

Scheduled events (events.DeliverAt) are counted apart: those waiting, when
the next is due by the database's clock, those overdue (due but not yet
moved to the outbox by a relay: a count that stays above 0 tells no relay
promotes them) and those cancelled (kept until cleanup removes them).

Dead letters are listed by source, "relay" first, then each consumer, and
under each its ten most frequent reasons, with the ids, numbers and quoted
values in them replaced by placeholders (<uuid>, <id>, <n>, "…"), so that
the letters of one cause are one line whatever order each names; an example
as written follows each.

On MySQL/MariaDB it prints the same but the fast relays and the WAL slots,
PostgreSQL's paths alone, which it names as not applicable there.

With --max-age, --max-dead-letters or --max-overdue it exits with status 1 when a threshold
is passed, saying which (after printing the status), for a cron job or a probe.

With --databases-file (the relay fleet's file of tenants), or
--registry-database-url (its registry table), it reads every
tenant's outbox instead and prints one line per tenant (pending events, age
of the oldest, open dead letters, held aggregates) and a total; --json gives
them as an array. A tenant that cannot be read (database down, tables
missing) is named on its line, the others are shown, and the command exits
with status 1; so does a tenant over a threshold, named.`,
		Example: `  entoutbox status --json
  entoutbox status --max-age 5m --max-dead-letters 0 --max-overdue 1m
  entoutbox status --databases-file databases.json --max-age 5m`,
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
	f.StringVar(&o.databasesFile, "databases-file", "", "JSON file of the tenants' databases (the relay's --databases-file): "+
		"one line per tenant and a total, thresholds per tenant")
	f.StringVar(&o.registryURL, "registry-database-url", "", "PostgreSQL database of the registry table of tenants (the relay's "+
		"--registry-database-url): its tenants too, as with --databases-file")
	f.StringVar(&o.registryTable, "registry-table", "", "the registry table (default "+fleet.DefaultRegistryTable+")")
	f.StringVar(&o.deadLetterTable, "dead-letter-table", "", "dead-letter table name (default outbox_dead_letters)")
	f.BoolVar(&o.asJSON, "json", false, "print JSON")
	f.DurationVar(&o.th.MaxAge, "max-age", 0, "exit 1 when the oldest pending event has waited longer (0: no limit)")
	f.Int64Var(&o.th.MaxDeadLetters, "max-dead-letters", -1, "exit 1 when there are more open dead letters (-1: no limit)")
	f.StringVar(&o.scheduledTable, "scheduled-table", "", "scheduled events' table name (default outbox_scheduled_events)")
	f.DurationVar(&o.th.MaxOverdue, "max-overdue", 0,
		"exit 1 when a scheduled event has been due longer without being sent (0: no limit)")
	return cmd
}

// run prints the status to out, and fails naming each threshold passed.
func (o *statusOptions) run(ctx context.Context, out io.Writer) error {
	db, err := openDB(o.databaseURL)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := checkTables(ctx, db, o.table, o.deadLetterTable); err != nil {
		return err
	}
	st, err := admin.ReadTablesStatus(ctx, db, admin.Tables{Outbox: o.table, DeadLetters: o.deadLetterTable,
		Scheduled: o.scheduledTable})
	if err != nil {
		return err
	}
	over := st.Check(o.th)
	if o.asJSON {
		if err := writeJSON(out, statusJSON{Status: st, OldestPendingAge: st.Age().Seconds(), Problems: orEmpty(over)}); err != nil {
			return err
		}
	} else {
		writeStatus(out, st)
	}
	if len(over) > 0 {
		return errors.New("status: " + strings.Join(over, "; "))
	}
	return nil
}

// statusJSON is the status with the age spelled out and the thresholds passed.
type statusJSON struct {
	admin.Status
	OldestPendingAge float64  `json:"oldest_pending_age_seconds"`
	Problems         []string `json:"problems"`
}

// MarshalJSON writes the status as it writes itself (absent times null),
// then the fields of its own: Status's method would otherwise stand for
// the whole of s.
func (s statusJSON) MarshalJSON() ([]byte, error) {
	st, err := json.Marshal(s.Status)
	if err != nil {
		return nil, err
	}
	return withFields(st, struct {
		OldestPendingAge float64  `json:"oldest_pending_age_seconds"`
		Problems         []string `json:"problems"`
	}{s.OldestPendingAge, s.Problems})
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func writeStatus(out io.Writer, st admin.Status) {
	if st.PendingCapped {
		fmt.Fprintf(out, "pending events:      at least %d (counting stops there)\n", st.Pending)
	} else {
		fmt.Fprintf(out, "pending events:      %d\n", st.Pending)
	}
	if st.Pending > 0 {
		fmt.Fprintf(out, "oldest pending age:  %s (written %s)\n",
			st.Age().Round(time.Millisecond), st.OldestPending.UTC().Format(time.RFC3339))
		failing := false
		for _, t := range st.Topics {
			failing = failing || t.Failing > 0
		}
		if len(st.Topics) > 1 || failing {
			for _, t := range st.Topics {
				fmt.Fprintf(out, "  %s: %d, oldest %s", t.Topic, t.Pending, st.At.Sub(t.OldestPending).Round(time.Millisecond))
				if t.Failing > 0 {
					fmt.Fprintf(out, "; %d failing, last error: %s", t.Failing, oneLine(t.LastError, 160))
				}
				fmt.Fprintln(out)
			}
		}
	} else {
		fmt.Fprintf(out, "oldest pending age:  0s\n")
	}
	dl := st.DeadLetters
	fmt.Fprintf(out, "dead letters:        %d\n", dl.Open)
	writeLetterReasons(out, dl)
	if dl.Retried > 0 || dl.Discarded > 0 {
		fmt.Fprintf(out, "settled letters:     %d retried, %d discarded\n", dl.Retried, dl.Discarded)
	}
	writeScheduled(out, st.Scheduled)
	writeHeld(out, st)
	writeLag(out, st)
	writeRelays(out, st)
	writeWALSlots(out, st.WAL)
	for i, n := range st.NotApplicable {
		label := "not on " + st.Database + ":"
		if i > 0 {
			label = ""
		}
		fmt.Fprintf(out, "%-21s%s\n", label, n)
	}
}

// writeRelays prints the relays sharing the outbox's partitions: the fast
// relays on PostgreSQL, the poll relays on MySQL (which hold no liveness
// lock: another takes their partitions when their lease ends).
func writeRelays(out io.Writer, st admin.Status) {
	if st.Partitions == 0 {
		return
	}
	label, poll := "fast relays:", st.Database == "MySQL"
	if poll {
		label = "poll relays:"
	}
	fmt.Fprintf(out, "%-21s%d, sharing %d partitions\n", label, len(st.Relays), st.Partitions)
	for _, r := range st.Relays {
		topic := r.Topic
		if topic == "" {
			topic = "every topic"
		}
		state := "lease until " + r.LeaseUntil.UTC().Format(time.RFC3339)
		switch {
		case r.Lapsed:
			state = fmt.Sprintf("lease lapsed %s ago: stopped renewing; the next relay to rebalance takes them",
				st.At.Sub(r.LeaseUntil).Round(time.Second))
		case r.Locks && !r.Live:
			state += "; not running (its liveness lock is gone): taken over within seconds"
		case r.Failing > 0:
			state += fmt.Sprintf("; failing: %s (%d pending rows of its partitions failed last time)",
				oneLine(r.LastError, 160), r.Failing)
		case !r.Locks && !poll:
			state += "; holds no liveness lock (poll-only, or an earlier version): taken over when its lease ends"
		}
		fmt.Fprintf(out, "  %s owns %d (%s), %s\n", r.Relay, r.Partitions, topic, state)
	}
}

// writeScheduled prints the scheduled events: how many wait, when the
// next is due by the database's clock, how many are overdue and
// cancelled. Nothing without the table.
func writeScheduled(out io.Writer, s admin.ScheduledSummary) {
	if !s.Table {
		return
	}
	atLeast := func(n int64, capped bool) string {
		if capped {
			return fmt.Sprintf("at least %d", n)
		}
		return strconv.FormatInt(n, 10)
	}
	fmt.Fprintf(out, "scheduled events:    %s waiting", atLeast(s.Waiting, s.WaitingCapped))
	if s.Waiting > 0 && s.Overdue == 0 {
		fmt.Fprintf(out, ", the next due %s (in %s)", s.NextDue.UTC().Format(time.RFC3339), s.NextDueIn().Round(time.Second))
	}
	fmt.Fprintf(out, ", %s cancelled\n", atLeast(s.Cancelled, s.CancelledCapped))
	if s.Overdue > 0 {
		fmt.Fprintf(out, "  OVERDUE: %s due and not sent yet, the earliest due %s (%s ago): "+
			"a relay moves them to the outbox when due; is one running?\n",
			atLeast(s.Overdue, s.OverdueCapped), s.NextDue.UTC().Format(time.RFC3339), s.OverdueBy().Round(time.Millisecond))
	}
	if len(s.Topics) > 1 {
		for _, t := range s.Topics {
			fmt.Fprintf(out, "  %s: %d, the next due %s", t.Topic, t.Waiting, t.NextDue.UTC().Format(time.RFC3339))
			if t.Overdue > 0 {
				fmt.Fprintf(out, ", %d overdue", t.Overdue)
			}
			fmt.Fprintln(out)
		}
	}
}

// writeLetterReasons prints the open dead letters by source, "relay"
// first, and each source's most frequent reasons (ids, numbers and quoted
// values replaced by placeholders), with an example where it differs.
func writeLetterReasons(out io.Writer, dl admin.DeadLetterSummary) {
	for _, src := range dl.Sources {
		fmt.Fprintf(out, "  from %s: %d, %s\n", src.Source, src.Open, plural(src.Reasons, "reason", "reasons"))
		var shown, letters int64
		for _, r := range dl.ByReason {
			if r.Source != src.Source {
				continue
			}
			shown++
			letters += r.Count
			fmt.Fprintf(out, "    %d: %s\n", r.Count, oneLine(r.Reason, 120))
			if r.Example != r.Reason {
				fmt.Fprintf(out, "      e.g. %s\n", oneLine(r.Example, 120))
			}
		}
		if shown < src.Reasons {
			fmt.Fprintf(out, "    %d more in %s (entoutbox dead-letters list --source %s)\n", src.Open-letters,
				plural(src.Reasons-shown, "other reason", "other reasons"), src.Source)
		}
	}
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.FormatInt(n, 10) + " " + many
}

// writeHeld prints the aggregates each consumer holds behind a dead
// letter, and what repairs them.
func writeHeld(out io.Writer, st admin.Status) {
	for _, h := range st.Held {
		fmt.Fprintf(out, "held aggregates:     %d by consumer %s (later events wait until the held event is applied: "+
			"retry its letter, or discard it to skip the event; entoutbox dead-letters list --consumer %s)\n", h.Count, h.Consumer, h.Consumer)
		for _, a := range h.Oldest {
			since := st.At.Sub(a.Since).Round(time.Second)
			if a.EventID == "" {
				fmt.Fprintf(out, "  %s %s/%s at seq %d, which never arrived (retry the relay's letter of it, or replay it: "+
					"entoutbox replay --event <its name> --aggregate %s --broker ...), for %s\n", a.Topic, a.AggregateType, a.AggregateID, a.Seq, a.AggregateID, since)
				continue
			}
			fmt.Fprintf(out, "  %s %s/%s behind event %s (seq %d), for %s\n", a.Topic, a.AggregateType, a.AggregateID,
				a.EventID, a.Seq, since)
		}
	}
}

// writeLag prints how far each consumer is behind on each topic, and how
// sure the age of the oldest is.
func writeLag(out io.Writer, st admin.Status) {
	if len(st.Lag) == 0 {
		return
	}
	fmt.Fprintf(out, "consumer lag:        events not handled yet, by consumer and topic\n")
	for _, l := range st.Lag {
		fmt.Fprintf(out, "  %s on %s: ", l.Consumer, l.Topic)
		switch {
		case l.Events == 0:
			fmt.Fprintf(out, "0\n")
		case l.OldestAgeSeconds == nil:
			fmt.Fprintf(out, "%d, the oldest's age unknown (none of them is among the outbox's newest %d rows: "+
				"deleted on delivery or by cleanup, or older)\n", l.Events, lag.DefaultMaxRows)
		case l.Exact():
			fmt.Fprintf(out, "%d, the oldest written %s ago\n", l.Events, seconds(*l.OldestAgeSeconds))
		default:
			fmt.Fprintf(out, "%d, the oldest written at least %s ago (%d of them found among the outbox's newest %d rows; "+
				"the others' rows are deleted or older)\n", l.Events, seconds(*l.OldestAgeSeconds), l.Located, lag.DefaultMaxRows)
		}
	}
}

func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(time.Second)
}

// writeWALSlots prints the WAL relays' slots: whether one streams each,
// and the WAL the server keeps for it.
func writeWALSlots(out io.Writer, slots []admin.WALSlot) {
	if len(slots) == 0 {
		return
	}
	fmt.Fprintf(out, "wal slots:           %d\n", len(slots))
	for _, w := range slots {
		switch {
		case !w.Exists:
			fmt.Fprintf(out, "  %s: gone from the server (dropped); a WAL relay creates it anew, from now on\n", w.Slot)
			continue
		case w.WALStatus == "lost":
			fmt.Fprintf(out, "  %s: LOST (invalidated by max_slot_wal_keep_size): events since its position must be replayed\n", w.Slot)
			continue
		}
		state := "active (a relay streams it)"
		if !w.Active {
			state = "inactive: no relay streams it, and the server keeps all WAL since its position (the disk grows)"
		}
		fmt.Fprintf(out, "  %s: %s; retains %s of WAL, confirmed %s behind\n", w.Slot, state,
			humanBytes(w.RetainedBytes), humanBytes(w.LagBytes))
	}
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// commandConnectWait bounds how long a command's connection waits for
// room on a server at its max_connections: the relay waits as long as it
// runs (openServiceDB), a command run by hand or from cron a while.
const commandConnectWait = 2 * time.Minute

// openDB opens the database of a command other than the relay:
// PostgreSQL or MySQL, not SQLite.
func openDB(databaseURL string) (*sql.DB, error) {
	if sqlitedb.IsURL(databaseURL) {
		return nil, errors.New("on SQLite the command runs the relay only for now (entoutbox relay --database-url sqlite:PATH); " +
			"status, dead letters, cleanup, replay and the console need PostgreSQL or MySQL/MariaDB")
	}
	return openCommandDB(databaseURL)
}

// openPostgresDB opens the database of a command that runs on PostgreSQL
// alone, named command.
func openPostgresDB(databaseURL, command string) (*sql.DB, error) {
	if mysqldb.IsURL(databaseURL) {
		return nil, fmt.Errorf("on MySQL/MariaDB %s needs PostgreSQL for now; the command runs the relay, status, "+
			"dead-letters, cleanup and the console there (--database-url mysql://…)", command)
	}
	return openDB(databaseURL)
}

// openCommandDB opens the database of a short command, whichever it is.
func openCommandDB(databaseURL string) (*sql.DB, error) {
	return openDBWith(databaseURL, pgdial.Options{MaxWait: commandConnectWait, ApplicationName: "entoutbox"})
}

// openServiceDB opens the pool of a long-running command (the relay):
// its connections are named app in pg_stat_activity, and a server with
// no room for another (too many clients, SQLSTATE 53300) is waited for
// as long as the command runs, said at the wait and when it ends.
func openServiceDB(databaseURL, app string, logger *slog.Logger, redact redactor) (*sql.DB, error) {
	return openDBWith(databaseURL, pgdial.Options{ApplicationName: app,
		Waiting: func(err error) {
			logger.Warn("PostgreSQL has no room for another connection; waiting for one", "error", redact.String(err.Error()))
		},
		Connected: func(waited time.Duration) {
			logger.Info("PostgreSQL took the connection", "waited", waited.Round(time.Millisecond).String())
		}})
}

func openDBWith(databaseURL string, opts pgdial.Options) (*sql.DB, error) {
	if databaseURL == "" {
		return nil, errors.New("no database: set --database-url, ENTOUTBOX_DATABASE_URL or DATABASE_URL to the URL of the database holding the outbox (postgres://…, mysql://… or sqlite:PATH)")
	}
	if sqlitedb.IsURL(databaseURL) {
		return sqlitedb.Open(databaseURL)
	}
	if mysqldb.IsURL(databaseURL) {
		return mysqldb.Open(databaseURL)
	}
	db, err := pgdial.Open(databaseURL, opts)
	if err != nil {
		return nil, fmt.Errorf("opening the database: %w", err)
	}
	return db, nil
}

// checkTables refuses a database without the outbox's tables as the relay
// does, saying what to run, where the first query would fail with a bare
// "relation ... does not exist".
func checkTables(ctx context.Context, db *sql.DB, table, deadLetterTable string) error {
	return tablesOf(db, table, deadLetterTable).Check(ctx, db)
}

// tablesOf names the outbox's tables in db's dialect.
func tablesOf(db *sql.DB, table, deadLetterTable string) outboxdb.Tables {
	t := outboxdb.New(table, deadLetterTable)
	t.Dialect = outboxdb.DialectOfDB(db)
	return t
}
