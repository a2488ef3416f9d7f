package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/entoutbox/entoutbox/admin"
)

// The retry design, shared by the help of retry and of the group.
const retryHelp = `retry puts a dead letter's event back in the outbox as a pending row with its
ORIGINAL event id, and the relay publishes it again:
  - a relay dead letter: the row is written again from the dead letter;
  - a consumer dead letter: the retained outbox row (or, when retention removed
    it, one rebuilt from the dead letter) is written again at the end of the
    outbox. The other consumers skip it as a duplicate (their processed
    events hold its id); the consumer that gave up handles it.
The letter stays, marked retried (its id moves to retried_event_id, so that its
consumer no longer skips the event). Retrying twice does nothing more: a letter
already retried or discarded is skipped, a pending row is not written twice,
and consumers dedupe by event id. Retry within the processed-events retention
(cleanup --processed-retention), or other consumers handle the event again. A
retry right after the first delivery reaches consumers on every broker: the
new row has its own broker message id (on NATS JetStream the Nats-Msg-Id,
which the stream would otherwise drop as a duplicate), the same event id.
An aggregate held behind a consumer's letter stays held until the retried
event is applied; its later events wait for it meanwhile. It is then held at
its next event if that one's letter is still open (retry it too, or discard
it to skip it), and goes on otherwise.`

// letterTables are the flags of the dead-letter commands that find the
// tables, named as relay's and status's.
type letterTables struct {
	databaseURL, table, deadLetterTable string
}

// open opens the database and an Admin on the tables, once they are
// there; done closes them.
func (o *letterTables) open(ctx context.Context) (a *admin.Admin, done func(), err error) {
	db, err := openDB(o.databaseURL)
	if err != nil {
		return nil, nil, err
	}
	a, err = admin.Open(db, admin.Tables{Outbox: o.table, DeadLetters: o.deadLetterTable})
	if err == nil {
		err = checkTables(ctx, db, o.table, o.deadLetterTable)
	}
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return a, func() { db.Close() }, nil
}

func newDeadLettersCommand() *cobra.Command {
	var o letterTables
	cmd := &cobra.Command{
		Use:     "dead-letters",
		Aliases: []string{"dead-letter", "dl"},
		Short:   "List, show, retry, discard and purge dead letters",
		Long: `dead-letters inspects and repairs the events set aside in the dead-letter table
(--dead-letter-table, default outbox_dead_letters), by the relay (source
"relay") or by a consumer (source = its name). A retry writes the event back
to the outbox table (--table, default outbox_events).

` + retryHelp + `

discard marks letters as handled by hand, with a note; nothing is deleted, and
the consumer keeps skipping the event. purge deletes letters retried or
discarded longer ago than --older-than; open letters are never deleted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	f := cmd.PersistentFlags()
	f.StringVar(&o.databaseURL, "database-url", "", "PostgreSQL URL of the database holding the outbox (env ENTOUTBOX_DATABASE_URL or DATABASE_URL)")
	f.StringVar(&o.table, "table", "", "outbox table name (default outbox_events)")
	f.StringVar(&o.deadLetterTable, "dead-letter-table", "", "dead-letter table name (default outbox_dead_letters)")
	cmd.AddCommand(newDeadLettersListCommand(&o), newDeadLettersShowCommand(&o), newDeadLettersRetryCommand(&o),
		newDeadLettersDiscardCommand(&o), newDeadLettersPurgeCommand(&o))
	return cmd
}

func newDeadLettersListCommand(o *letterTables) *cobra.Command {
	var (
		f            letterFilter
		asJSON, full bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List dead letters, newest first",
		Example: `  entoutbox dead-letters list --consumer billing --since 24h
  entoutbox dead-letters list --event order.paid --reason "newer than" --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return err
			}
			a, done, err := o.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			ds, err := a.ListDeadLetters(cmd.Context(), f.filter())
			if err != nil {
				return err
			}
			if asJSON {
				out := make([]json.RawMessage, len(ds))
				for i, d := range ds {
					if out[i], err = letterJSON(d, full); err != nil {
						return err
					}
				}
				return writeJSON(cmd.OutOrStdout(), out)
			}
			return writeLetterTable(cmd.OutOrStdout(), ds)
		},
	}
	f.add(cmd, true)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&full, "full", false, fmt.Sprintf("with --json, whole payloads (else cut at %s)", humanBytes(payloadShown)))
	return cmd
}

func newDeadLettersShowCommand(o *letterTables) *cobra.Command {
	var asJSON, full bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one dead letter: payload, headers, reason, attempts, when, source, event id",
		Long: fmt.Sprintf(`show prints one dead letter. A payload over %s is cut there, saying so
(in JSON: payload_text holds the start, payload_truncated and payload_bytes
say so); --full prints it whole.`, humanBytes(payloadShown)),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseIDs(args)
			if err != nil {
				return err
			}
			a, done, err := o.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			d, err := a.DeadLetterByID(cmd.Context(), ids[0])
			if err != nil {
				return err
			}
			if asJSON {
				b, err := letterJSON(d, full)
				if err != nil {
					return err
				}
				return writeJSON(cmd.OutOrStdout(), b)
			}
			writeLetter(cmd.OutOrStdout(), d, full)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&full, "full", false, fmt.Sprintf("print the whole payload (else cut at %s)", humanBytes(payloadShown)))
	return cmd
}

func newDeadLettersRetryCommand(o *letterTables) *cobra.Command {
	var (
		f letterFilter
		g guards
	)
	cmd := &cobra.Command{
		Use:   "retry ID... | --all [filters]",
		Short: "Put dead letters' events back in the outbox, with their original ids, for another delivery",
		Long: retryHelp + `

--dry-run prints what each letter's retry would do (rebuilt, requeued,
already pending, or skipped and why) and changes nothing. --all without a
filter (--source, --event, --reason, --since, --until) asks before retrying
every open letter; --yes does not ask. The exit status is 1 when a letter
asked for is skipped, or --all selects none.`,
		Example: `  entoutbox dead-letters retry 42 43
  entoutbox dead-letters retry --all --consumer billing --reason "connection refused" --dry-run
  entoutbox dead-letters retry --all --consumer billing --reason "connection refused" --limit 100`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.run(cmd, o, args, f, "retry", "retried", func(a *admin.Admin, ids []int64) ([]admin.Result, error) {
				if g.dryRun {
					return a.PlanRetry(cmd.Context(), ids...)
				}
				return a.Retry(cmd.Context(), ids...)
			})
		},
	}
	f.add(cmd, false)
	g.add(cmd, "retry")
	return cmd
}

func newDeadLettersDiscardCommand(o *letterTables) *cobra.Command {
	var (
		f    letterFilter
		g    guards
		note string
	)
	cmd := &cobra.Command{
		Use:   "discard ID... | --all [filters] --note TEXT",
		Short: "Mark dead letters as handled by hand, with a note; nothing is deleted",
		Long: `discard marks dead letters discarded (discarded_at, discard_note). Nothing is
deleted: the letter stays until purge, and its consumer keeps skipping the
event, replayed or not.

Discarding a letter skips its event in its aggregate's order: the
consumer's position moves past it (at once when the aggregate waits for it,
else when the aggregate reaches it), so the aggregate goes on. When the next
event is in the dead letters too (set aside behind the held one), the
aggregate is held at that one instead: retry it, or discard it to skip it
too. A relay's letter discarded is skipped by every consumer. The output
says where each position moved.

--dry-run prints what it would do and changes nothing. --all without a
filter asks before discarding every open letter; --yes does not ask. The
exit status is 1 when a letter asked for is skipped, or --all selects none.`,
		Example: `  entoutbox dead-letters discard 42 --note "refunded by hand, ticket 1234"`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(note) == "" {
				return errors.New("discard needs --note saying why")
			}
			return g.run(cmd, o, args, f, "discard", "discarded", func(a *admin.Admin, ids []int64) ([]admin.Result, error) {
				if g.dryRun {
					return a.PlanDiscard(cmd.Context(), note, ids...)
				}
				return a.Discard(cmd.Context(), note, ids...)
			})
		},
	}
	f.add(cmd, false)
	g.add(cmd, "discard")
	cmd.Flags().StringVar(&note, "note", "", "why (required)")
	return cmd
}

// guards are the flags of the commands that change dead letters: which
// letters (ids or --all), a dry run, and the confirmation of --all
// without a filter.
type guards struct {
	all, dryRun, yes bool
}

func (g *guards) add(cmd *cobra.Command, verb string) {
	f := cmd.Flags()
	f.BoolVar(&g.all, "all", false, verb+" every open dead letter the filters select")
	f.BoolVar(&g.dryRun, "dry-run", false, "print what would be done, and change nothing")
	f.BoolVar(&g.yes, "yes", false, "do not ask before --all without a filter")
}

// run finds the letters args or --all with f name, asks before acting on
// every open letter, acts on them (act), prints the outcome, and fails
// when a letter asked for was skipped or none was selected.
func (g *guards) run(cmd *cobra.Command, o *letterTables, args []string, f letterFilter, verb, done string,
	act func(*admin.Admin, []int64) ([]admin.Result, error)) error {
	ids, err := idsOrAll(args, g.all, f)
	if err != nil {
		return err
	}
	if err := f.check(); err != nil {
		return err
	}
	a, closeDB, err := o.open(cmd.Context())
	if err != nil {
		return err
	}
	defer closeDB()
	if g.all {
		// The letters are listed once: the action is on those, not on
		// what arrives while the operator reads the question.
		if ids, err = a.OpenDeadLetterIDs(cmd.Context(), f.filter()); err != nil {
			return err
		}
		if len(ids) == 0 {
			return fmt.Errorf("%s: no open dead letter matches the filters; nothing to %s", verb, verb)
		}
		if !f.selects() && !g.yes && !g.dryRun {
			if err := confirm(cmd, fmt.Sprintf("%s every open dead letter, %d of them (no filter given)?", verb, len(ids))); err != nil {
				return fmt.Errorf("%s: %w: nothing done; give --yes to %s every open dead letter without asking, "+
					"or a filter (--source, --event, --reason, --since, --until)", verb, err, verb)
			}
		}
	}
	rs, err := act(a, ids)
	writeResults(cmd.OutOrStdout(), done, rs, g.dryRun)
	if err != nil {
		return err
	}
	skipped := 0
	for _, r := range rs {
		if r.Outcome == admin.Skipped {
			skipped++
		}
	}
	if skipped > 0 {
		would := ""
		if g.dryRun {
			would = " would be"
		}
		return fmt.Errorf("%s: %d of %d dead letters%s skipped (see above)", verb, skipped, len(rs), would)
	}
	return nil
}

// confirm asks question on the command's error output and reads the
// answer from its input: yes, or y. Anything else, or no input (a cron
// job), is a refusal.
func confirm(cmd *cobra.Command, question string) error {
	fmt.Fprintf(cmd.ErrOrStderr(), "%s Type yes to go on: ", question)
	answer, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
	answer = strings.ToLower(strings.TrimSpace(answer))
	if answer == "yes" || answer == "y" {
		return nil
	}
	if err != nil && answer == "" {
		return errors.New("not confirmed (no answer on the input)")
	}
	return fmt.Errorf("not confirmed (answered %q)", answer)
}

func newDeadLettersPurgeCommand(o *letterTables) *cobra.Command {
	var (
		olderThan time.Duration
		batch     int
	)
	cmd := &cobra.Command{
		Use:   "purge",
		Short: "Delete dead letters retried or discarded longer ago than --older-than; never open ones",
		Long: `purge deletes, in small batches, the dead letters retried or discarded longer
ago than --older-than. Open letters are never deleted. A purged discarded
letter no longer keeps its consumer from handling the event if it is
delivered again (by a replay, say).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan < 0 {
				return fmt.Errorf("--older-than %s: must not be negative", olderThan)
			}
			a, done, err := o.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			n, err := a.PurgeSettled(cmd.Context(), olderThan, batch)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted %d dead letters retried or discarded more than %s ago\n", n, olderThan)
			return nil
		},
	}
	cmd.Flags().DurationVar(&olderThan, "older-than", 30*24*time.Hour, "keep settled dead letters this long")
	cmd.Flags().IntVar(&batch, "batch-size", 1000, "rows deleted per statement")
	return cmd
}

// letterFilter is the filter flags of the dead-letter commands.
type letterFilter struct {
	source, consumer, event, reason, state string
	since, until                           timeFlag
	limit                                  int
}

func (f *letterFilter) add(cmd *cobra.Command, listing bool) {
	fl := cmd.Flags()
	fl.StringVar(&f.source, "source", "", `"relay" or a consumer name`)
	fl.StringVar(&f.consumer, "consumer", "", "a consumer name (the same as --source)")
	fl.StringVar(&f.event, "event", "", "event name, e.g. order.paid")
	fl.StringVar(&f.reason, "reason", "", "a substring of the reason")
	fl.Var(&f.since, "since", "dead-lettered at or after: RFC 3339, a date, or a duration ago (24h)")
	fl.Var(&f.until, "until", "dead-lettered before: RFC 3339, a date, or a duration ago")
	fl.IntVar(&f.limit, "limit", 0, "at most this many (0: all)")
	if listing {
		fl.StringVar(&f.state, "state", "", "open, retried or discarded (default all)")
	}
}

func (f *letterFilter) filter() admin.Filter {
	source := f.source
	if source == "" {
		source = f.consumer
	}
	return admin.Filter{Source: source, Event: f.event, Reason: f.reason,
		Since: f.since.t, Until: f.until.t, State: admin.State(f.state), Limit: f.limit}
}

// check refuses flags that contradict each other, naming them.
func (f *letterFilter) check() error {
	switch {
	case f.source != "" && f.consumer != "" && f.source != f.consumer:
		return fmt.Errorf("--source %q and --consumer %q name two sources; give one", f.source, f.consumer)
	case !f.since.t.IsZero() && !f.until.t.IsZero() && !f.until.t.After(f.since.t):
		return fmt.Errorf("--until %s is not after --since %s: no letter is in between", f.until.String(), f.since.String())
	case f.limit < 0:
		return fmt.Errorf("--limit %d: must not be negative (0: all)", f.limit)
	}
	return nil
}

// selects tells a filter narrows the letters by what they are (a limit
// alone does not).
func (f *letterFilter) selects() bool {
	return f.source != "" || f.consumer != "" || f.event != "" || f.reason != "" || !f.since.t.IsZero() || !f.until.t.IsZero()
}

func (f *letterFilter) any() bool { return f.selects() || f.limit > 0 }

// idsOrAll checks that the letters are named either by id or by --all.
func idsOrAll(args []string, all bool, f letterFilter) ([]int64, error) {
	switch {
	case all && len(args) > 0:
		return nil, errors.New("give dead-letter ids or --all, not both")
	case all:
		return nil, nil
	case len(args) == 0:
		return nil, errors.New("give dead-letter ids, or --all with filters")
	case f.any():
		return nil, errors.New("filters select letters only with --all")
	}
	return parseIDs(args)
}

func parseIDs(args []string) ([]int64, error) {
	ids := make([]int64, 0, len(args))
	for _, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			return nil, fmt.Errorf("%q is not a dead-letter id", a)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// timeFlag is a point in time given as RFC 3339, a date or a duration ago.
type timeFlag struct{ t time.Time }

func (f *timeFlag) String() string {
	if f.t.IsZero() {
		return ""
	}
	return f.t.Format(time.RFC3339)
}

func (f *timeFlag) Type() string { return "time" }

func (f *timeFlag) Set(s string) error {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			f.t = t
			return nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		f.t = time.Now().Add(-d)
		return nil
	}
	return fmt.Errorf("%q is neither a time (RFC 3339 or 2006-01-02) nor a duration ago (24h)", s)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func writeLetterTable(w io.Writer, ds []admin.DeadLetter) error {
	if len(ds) == 0 {
		_, err := fmt.Fprintln(w, "no dead letters")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tWHEN\tSOURCE\tEVENT\tEVENT ID\tATTEMPTS\tSTATE\tREASON")
	for _, d := range ds {
		event := d.EventName
		if d.EventVersion > 0 {
			event += " v" + strconv.Itoa(d.EventVersion)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", d.ID, d.CreatedAt.UTC().Format(time.RFC3339),
			d.Source, event, eventIDText(d), d.Attempts, d.State(), oneLine(d.Reason, 80))
	}
	return tw.Flush()
}

// payloadShown is how much of a payload show prints, and list --json,
// unless --full: a payload of megabytes would bury the rest.
const payloadShown = 64 << 10

// shownPayload is the first payloadShown bytes of p (cut at a rune
// boundary when p is UTF-8), or p whole when full or short enough;
// truncated says it was cut.
func shownPayload(p []byte, full bool) (shown []byte, truncated bool) {
	if full || len(p) <= payloadShown {
		return p, false
	}
	shown = p[:payloadShown]
	if utf8.Valid(p) {
		for len(shown) > 0 && !utf8.Valid(shown) {
			shown = shown[:len(shown)-1]
		}
	}
	return shown, true
}

// letterJSON is d as JSON, its payload cut as shownPayload cuts it: then
// in payload_text (or payload_base64, not UTF-8), with payload_truncated
// and payload_bytes.
func letterJSON(d admin.DeadLetter, full bool) (json.RawMessage, error) {
	shown, truncated := shownPayload(d.Payload, full)
	if !truncated {
		return json.Marshal(d)
	}
	size := len(d.Payload)
	d.Payload = shown
	b, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	return withFields(b, struct {
		Truncated bool `json:"payload_truncated"`
		Bytes     int  `json:"payload_bytes"`
	}{true, size})
}

// withFields appends the fields of the JSON object of v to the JSON
// object obj.
func withFields(obj []byte, v any) ([]byte, error) {
	more, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if len(obj) < 2 || obj[len(obj)-1] != '}' || len(more) < 2 || more[0] != '{' {
		return nil, fmt.Errorf("joining JSON objects %.20s and %.20s", obj, more)
	}
	if len(more) == 2 {
		return obj, nil
	}
	out := append(obj[:len(obj)-1:len(obj)-1], ',')
	if len(obj) == 2 {
		out = out[:1]
	}
	return append(out, more[1:]...), nil
}

func writeLetter(w io.Writer, d admin.DeadLetter, full bool) {
	line := func(k, v string) { fmt.Fprintf(w, "%-16s%s\n", k+":", v) }
	line("id", strconv.FormatInt(d.ID, 10))
	line("event id", eventIDText(d))
	line("source", d.Source)
	line("event", fmt.Sprintf("%s v%d", d.EventName, d.EventVersion))
	line("topic", d.Topic)
	line("aggregate", d.AggregateType+" "+d.AggregateID)
	line("dead-lettered", d.CreatedAt.UTC().Format(time.RFC3339Nano))
	line("attempts", strconv.Itoa(d.Attempts))
	line("state", string(d.State()))
	if d.RetriedAt != nil {
		line("retried at", d.RetriedAt.UTC().Format(time.RFC3339Nano))
	}
	if d.DiscardedAt != nil {
		line("discarded at", d.DiscardedAt.UTC().Format(time.RFC3339Nano))
		line("note", d.DiscardNote)
	}
	line("reason", d.Reason)
	line("headers", string(d.Headers))
	p, truncated := shownPayload(d.Payload, full)
	switch {
	case len(p) == 0 || json.Valid(p) || truncated && utf8.Valid(p):
		line("payload", string(p))
	case utf8.Valid(p):
		line("payload", strconv.Quote(string(p))+" (not JSON)")
	default:
		line("payload", fmt.Sprintf("%q (not UTF-8)", p))
	}
	if truncated {
		fmt.Fprintf(w, "\n… payload cut at %s of %s; --full prints it whole\n", humanBytes(int64(len(p))),
			humanBytes(int64(len(d.Payload))))
	}
}

func eventIDText(d admin.DeadLetter) string {
	if d.EventID != uuid.Nil {
		return d.EventID.String()
	}
	return "-"
}

// oneLine shortens s to one line of at most n runes, for a table cell.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// writeResults prints what was done with each letter, or what would be
// (dryRun).
func writeResults(w io.Writer, verb string, rs []admin.Result, dryRun bool) {
	done, would := 0, ""
	if dryRun {
		would = "would be "
	}
	for _, r := range rs {
		id := "-"
		if r.EventID != uuid.Nil {
			id = r.EventID.String()
		}
		if r.Outcome == admin.Skipped {
			fmt.Fprintf(w, "dead letter %d (event %s, %s): %sskipped: %s\n", r.Letter, id, r.Source, would, r.Why)
			continue
		}
		done++
		fmt.Fprintf(w, "dead letter %d (event %s, %s): %s%s\n", r.Letter, id, r.Source, would, r.Outcome)
		for _, p := range r.Positions {
			fmt.Fprintf(w, "  %s%s\n", would, p)
		}
	}
	if dryRun {
		fmt.Fprintf(w, "dry run: %d of %d dead letters would be %s; nothing was changed\n", done, len(rs), verb)
		return
	}
	fmt.Fprintf(w, "%s %d of %d dead letters\n", verb, done, len(rs))
}
