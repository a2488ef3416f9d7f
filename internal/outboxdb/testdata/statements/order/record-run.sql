-- order/record-run
WITH v AS (SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::uuid[], $8::text[], $9::bool[], $10::bigint[])
			AS v(consumer, i, topic, aggregate_type, aggregate_id, seq, event_id, event_name, rec, attempts)),
		free AS (SELECT * FROM v WHERE NOT EXISTS (SELECT 1 FROM "outbox_dead_letters" d WHERE d.event_id = v.event_id AND d.source = v.consumer)),
		keys AS (SELECT DISTINCT consumer, topic, aggregate_type, aggregate_id FROM v WHERE seq > 0),
		locked AS (
			SELECT p.id, p.consumer, p.topic, p.aggregate_type, p.aggregate_id, p.last_seq, p.held_seq FROM "outbox_consumer_positions" p
			JOIN keys k ON p.consumer = k.consumer AND p.topic = k.topic AND p.aggregate_type = k.aggregate_type AND p.aggregate_id = k.aggregate_id
			ORDER BY p.consumer, p.topic, p.aggregate_type, p.aggregate_id
			FOR UPDATE OF p),
		run AS (
			SELECT f.i, f.seq, l.id, l.last_seq + row_number() OVER (PARTITION BY l.id ORDER BY f.seq) AS want
			FROM free f JOIN locked l ON f.consumer = l.consumer AND f.topic = l.topic AND f.aggregate_type = l.aggregate_type AND f.aggregate_id = l.aggregate_id
			WHERE f.seq > l.last_seq AND l.held_seq IS NULL),
		moving AS (SELECT i, id, seq FROM run WHERE seq = want),
		moved AS (
			UPDATE "outbox_consumer_positions" p SET last_seq = m.top, waiting_since = CASE WHEN p.waiting_seq > m.top THEN now() END,
		waiting_seq = CASE WHEN p.waiting_seq IS NOT NULL THEN
			(SELECT CASE WHEN p.waiting_seq > m.top THEN p.waiting_seq END FROM pg_notify('outbox_consumer_positions', json_build_object('schema', current_schema(), 'consumer', p.consumer, 'topic', p.topic, 'aggregate_type', p.aggregate_type, 'aggregate_id', p.aggregate_id, 'last_seq', m.top, 'waiting_seq', CASE WHEN p.waiting_seq > m.top THEN p.waiting_seq END)::text)) END, updated_at = now()
			FROM (SELECT id, max(seq) AS top FROM moving GROUP BY id) m WHERE p.id = m.id
			RETURNING p.id),
		first AS (
			SELECT f.i, f.consumer, f.topic, f.aggregate_type, f.aggregate_id, f.seq,
				row_number() OVER (PARTITION BY f.consumer, f.topic, f.aggregate_type, f.aggregate_id ORDER BY f.seq) AS want
			FROM free f WHERE f.seq > 0 AND NOT EXISTS (SELECT 1 FROM locked l WHERE l.consumer = f.consumer AND l.topic = f.topic AND l.aggregate_type = f.aggregate_type AND l.aggregate_id = f.aggregate_id)),
		made AS (
			INSERT INTO "outbox_consumer_positions" AS p (consumer, topic, aggregate_type, aggregate_id, last_seq, updated_at)
			SELECT consumer, topic, aggregate_type, aggregate_id, max(seq), now() FROM first WHERE seq = want
			GROUP BY consumer, topic, aggregate_type, aggregate_id
			ORDER BY consumer, topic, aggregate_type, aggregate_id
			ON CONFLICT (consumer, topic, aggregate_type, aggregate_id) DO UPDATE
			SET last_seq = excluded.last_seq, waiting_since = CASE WHEN p.waiting_seq > excluded.last_seq THEN now() END,
		waiting_seq = CASE WHEN p.waiting_seq IS NOT NULL THEN
			(SELECT CASE WHEN p.waiting_seq > excluded.last_seq THEN p.waiting_seq END FROM pg_notify('outbox_consumer_positions', json_build_object('schema', current_schema(), 'consumer', p.consumer, 'topic', p.topic, 'aggregate_type', p.aggregate_type, 'aggregate_id', p.aggregate_id, 'last_seq', excluded.last_seq, 'waiting_seq', CASE WHEN p.waiting_seq > excluded.last_seq THEN p.waiting_seq END)::text)) END, updated_at = now()
			WHERE p.last_seq = 0 AND p.held_seq IS NULL
			RETURNING p.consumer, p.topic, p.aggregate_type, p.aggregate_id),
		applied AS (
			SELECT m.i FROM moving m JOIN moved USING (id)
			UNION ALL SELECT f.i FROM made m JOIN first f ON f.consumer = m.consumer AND f.topic = m.topic AND f.aggregate_type = m.aggregate_type AND f.aggregate_id = m.aggregate_id AND f.seq = f.want
			UNION ALL SELECT i FROM free WHERE seq = 0),
		done AS (
			INSERT INTO "outbox_processed_events" (consumer, event_id, event_name, attempts)
			SELECT v.consumer, v.event_id, v.event_name, v.attempts FROM v JOIN applied a ON a.i = v.i WHERE v.rec
			ORDER BY v.consumer, v.event_id
			ON CONFLICT (consumer, event_id) DO NOTHING
			RETURNING consumer, event_id)
		SELECT v.i, a.i IS NOT NULL, NOT v.rec OR EXISTS (SELECT 1 FROM done d WHERE d.consumer = v.consumer AND d.event_id = v.event_id)
		FROM v LEFT JOIN applied a ON a.i = v.i
