-- numbering/install
DO $entoutbox$
DECLARE
	tbl regclass := to_regclass('"outbox_events"');
	seqs regclass := to_regclass('"outbox_aggregate_sequences"');
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
	fn := format('%I.%I', ns, 'outbox_events_aggregate_seq');
	-- The body names both tables with their schema, resolved now: the
	-- inserting session's search_path must not choose the counters.
	-- A row numbered here takes its id after its number, as Emit's do:
	-- its id was drawn before the trigger waited for the counter.
	idseq := pg_get_serial_sequence(qtbl, 'id');
	body := replace(replace(replace('
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
	RAISE EXCEPTION ''entoutbox: aggregate_seq % of aggregate %/% on topic % is not the next number: the counter in % is at %'',
		given, NEW.aggregate_type, NEW.aggregate_id, NEW.topic, ''outbox_aggregate_sequences'', coalesce(last, 0)
		USING ERRCODE = ''check_violation'',
		HINT = ''Leave aggregate_seq out (NULL) and the database numbers the row. A number set by hand must be the next one, ''
			|| (coalesce(last, 0) + 1)::text
			|| ''; one at or below the counter writes again an event that has it (as dead-letters retry does).'';
END
', '@seqs@', qseqs), '@outbox@', qtbl), '@newid@',
		CASE WHEN idseq IS NULL THEN '' ELSE format('NEW.id := nextval(%L::regclass);', idseq) END);
	IF NOT EXISTS (SELECT 1 FROM pg_proc WHERE oid = to_regprocedure(fn || '()') AND prosrc = body) THEN
		EXECUTE format('CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS %L', fn, body);
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = tbl AND tgname = 'entoutbox_aggregate_seq'
			AND tgfoid = to_regprocedure(fn || '()') AND tgenabled <> 'D') THEN
		IF EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = tbl AND tgname = 'entoutbox_aggregate_seq') THEN
			EXECUTE format('DROP TRIGGER %I ON %s', 'entoutbox_aggregate_seq', tbl);
		END IF;
		EXECUTE format('CREATE TRIGGER %I BEFORE INSERT ON %s FOR EACH ROW EXECUTE FUNCTION %s()',
			'entoutbox_aggregate_seq', tbl, fn);
	END IF;
END
$entoutbox$
