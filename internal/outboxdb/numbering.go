package outboxdb

import (
	"strings"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// NumberingTrigger is the name of the trigger that numbers the outbox rows
// written without Emit (NumberingQuery); the function it runs is named
// after the outbox table (NumberingFunction).
const NumberingTrigger = "entoutbox_aggregate_seq"

// NumberingFunction is the name of the trigger function of the outbox
// table outbox, in the table's schema: one per outbox table, since it
// names that table's counters.
func NumberingFunction(outbox string) string { return outbox + "_aggregate_seq" }

// NumberingQuery is the statement that installs, in the schema of the
// outbox table, the trigger that gives each row inserted without Emit its
// aggregate_seq from the counters in t.Sequences, as Emit does (see
// numberingBody for the rules). It is one DO block, so that a migration
// printed with ent's WriteTo carries it too; it does nothing when either
// table is missing, and changes nothing when the function and the trigger
// are as it would make them, so that running it on every start of an
// application takes no lock on the outbox table. Installers wait for each
// other (an advisory lock on the table), so that concurrent starts do not
// fail on each other's catalog writes.
func (t Tables) NumberingQuery() string { return numberingInstall.SQL(t) }

var numberingInstall = define("numbering/install", func(t Tables) string {
	body := strings.ReplaceAll(numberingBody, "@seqsname@", pgsql.QuoteLiteral(t.Sequences))
	return `DO $entoutbox$
DECLARE
	tbl regclass := to_regclass(` + pgsql.QuoteLiteral(pgsql.QuoteIdent(t.Outbox)) + `);
	seqs regclass := to_regclass(` + pgsql.QuoteLiteral(pgsql.QuoteIdent(t.Sequences)) + `);
	ns text;
	qtbl text;
	qseqs text;
	fn text;
	idseq text;
	body text;
BEGIN
	IF tbl IS NULL OR seqs IS NULL THEN
		RETURN;
	END IF;
	PERFORM pg_advisory_xact_lock(hashtextextended('entoutbox_numbering:' || tbl::oid::text, 0));
	SELECT n.nspname, format('%I.%I', n.nspname, c.relname) INTO ns, qtbl
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = tbl;
	SELECT format('%I.%I', n.nspname, c.relname) INTO qseqs
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = seqs;
	fn := format('%I.%I', ns, ` + pgsql.QuoteLiteral(NumberingFunction(t.Outbox)) + `);
	-- The body names both tables with their schema, resolved now: the
	-- inserting session's search_path must not choose the counters.
	-- A row numbered here takes its id after its number, as Emit's do:
	-- its id was drawn before the trigger waited for the counter.
	idseq := pg_get_serial_sequence(qtbl, 'id');
	body := replace(replace(replace(` + pgsql.QuoteLiteral(body) + `, '@seqs@', qseqs), '@outbox@', qtbl), '@newid@',
		CASE WHEN idseq IS NULL THEN '' ELSE format('NEW.id := nextval(%L::regclass);', idseq) END);
	IF NOT EXISTS (SELECT 1 FROM pg_proc WHERE oid = to_regprocedure(fn || '()') AND prosrc = body) THEN
		EXECUTE format('CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS %L', fn, body);
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = tbl AND tgname = ` + pgsql.QuoteLiteral(NumberingTrigger) + `
			AND tgfoid = to_regprocedure(fn || '()') AND tgenabled <> 'D') THEN
		IF EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = tbl AND tgname = ` + pgsql.QuoteLiteral(NumberingTrigger) + `) THEN
			EXECUTE format('DROP TRIGGER %I ON %s', ` + pgsql.QuoteLiteral(NumberingTrigger) + `, tbl);
		END IF;
		EXECUTE format('CREATE TRIGGER %I BEFORE INSERT ON %s FOR EACH ROW EXECUTE FUNCTION %s()',
			` + pgsql.QuoteLiteral(NumberingTrigger) + `, tbl, fn);
	END IF;
END
$entoutbox$`
})

// numberingBody is the trigger function; @seqs@ and @outbox@ become the
// qualified names of the counters and of the outbox table, @newid@ the
// drawing of a new id (none when the id has no sequence). The rules:
//
//   - A number at or below the aggregate's counter is kept: Emit's rows
//     (numbered in the same statement, under the counter's lock), a
//     promoted scheduled event's, a retried dead letter's. This is the
//     path of every Emit: one read of the counter by its key, no write.
//   - No number: the counter's next, taken as Emit takes it (the counter
//     row stays locked until the transaction ends, so the numbers have no
//     gaps and follow commit order). The row then draws a new id
//     (@newid@): the one drawn before the trigger waited for the counter
//     could be below that of an earlier number's row, and the relay reads
//     an aggregate in id order.
//   - A number set by hand above the counter must be the next one: the
//     counter moves to it, under its lock, so the next Emit does not give
//     it again; a new id as above. Any other is refused: it would leave a gap that consumers
//     wait on for ever.
//
// A row whose event id is in the outbox already takes no number: ON
// CONFLICT (event_id) DO NOTHING skips it after this trigger ran, and a
// number taken for it would be a gap.
const numberingBody = `
DECLARE
	given bigint := NEW.aggregate_seq;
	last bigint;
BEGIN
	IF given IS NOT NULL THEN
		SELECT c.last_seq INTO last FROM @seqs@ c
			WHERE c.topic = NEW.topic AND c.aggregate_type = NEW.aggregate_type AND c.aggregate_id = NEW.aggregate_id;
		IF last >= given THEN
			RETURN NEW;
		END IF;
	END IF;
	IF EXISTS (SELECT 1 FROM @outbox@ o WHERE o.event_id = NEW.event_id) THEN
		RETURN NEW;
	END IF;
	IF given IS NULL THEN
		INSERT INTO @seqs@ AS c (topic, aggregate_type, aggregate_id, last_seq)
			VALUES (NEW.topic, NEW.aggregate_type, NEW.aggregate_id, 1)
			ON CONFLICT (topic, aggregate_type, aggregate_id) DO UPDATE SET last_seq = c.last_seq + 1
			RETURNING c.last_seq INTO NEW.aggregate_seq;
		@newid@
		RETURN NEW;
	END IF;
	UPDATE @seqs@ c SET last_seq = given
		WHERE c.topic = NEW.topic AND c.aggregate_type = NEW.aggregate_type AND c.aggregate_id = NEW.aggregate_id
		AND c.last_seq = given - 1;
	IF FOUND THEN
		@newid@
		RETURN NEW;
	END IF;
	IF given = 1 THEN
		INSERT INTO @seqs@ (topic, aggregate_type, aggregate_id, last_seq)
			VALUES (NEW.topic, NEW.aggregate_type, NEW.aggregate_id, 1) ON CONFLICT DO NOTHING;
		IF FOUND THEN
			@newid@
			RETURN NEW;
		END IF;
	END IF;
	SELECT c.last_seq INTO last FROM @seqs@ c
		WHERE c.topic = NEW.topic AND c.aggregate_type = NEW.aggregate_type AND c.aggregate_id = NEW.aggregate_id;
	RAISE EXCEPTION 'entoutbox: aggregate_seq % of aggregate %/% on topic % is not the next number: the counter in % is at %',
		given, NEW.aggregate_type, NEW.aggregate_id, NEW.topic, @seqsname@, coalesce(last, 0)
		USING ERRCODE = 'check_violation',
		HINT = 'Leave aggregate_seq out (NULL) and the database numbers the row. A number set by hand must be the next one, '
			|| (coalesce(last, 0) + 1)::text
			|| '; one at or below the counter writes again an event that has it (as dead-letters retry does).';
END
`
