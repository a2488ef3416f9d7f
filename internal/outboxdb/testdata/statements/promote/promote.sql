-- promote/promote
WITH lock AS (SELECT pg_try_advisory_xact_lock(hashtextextended('entoutbox_promote:' || to_regclass('"outbox_scheduled_events"')::oid::text, 0)) AS got),
due AS (SELECT s.id, s.topic, s.aggregate_type, s.aggregate_id FROM "outbox_scheduled_events" s WHERE (SELECT got FROM lock)
	AND s.cancelled_at IS NULL AND s.deliver_at <= (SELECT clock_timestamp())
	AND NOT EXISTS (SELECT 1 FROM "outbox_events" o WHERE o.event_id = s.event_id)
	ORDER BY s.deliver_at, s.id LIMIT $1 FOR UPDATE OF s SKIP LOCKED),
free AS (SELECT c.topic, c.aggregate_type, c.aggregate_id FROM "outbox_aggregate_sequences" c
	WHERE (c.topic, c.aggregate_type, c.aggregate_id) IN (SELECT topic, aggregate_type, aggregate_id FROM due)
	FOR UPDATE SKIP LOCKED),
moved AS (DELETE FROM "outbox_scheduled_events" s USING due d WHERE s.id = d.id
	AND (EXISTS (SELECT 1 FROM free f WHERE (f.topic, f.aggregate_type, f.aggregate_id) = (d.topic, d.aggregate_type, d.aggregate_id))
		OR NOT EXISTS (SELECT 1 FROM "outbox_aggregate_sequences" c WHERE (c.topic, c.aggregate_type, c.aggregate_id) = (d.topic, d.aggregate_type, d.aggregate_id)))
	RETURNING s.*),
counts AS (SELECT topic, aggregate_type, aggregate_id, count(*) AS n FROM moved GROUP BY 1, 2, 3),
numbered AS (INSERT INTO "outbox_aggregate_sequences" AS c (topic, aggregate_type, aggregate_id, last_seq)
	SELECT topic, aggregate_type, aggregate_id, n FROM counts ORDER BY 1, 2, 3
	ON CONFLICT (topic, aggregate_type, aggregate_id) DO UPDATE SET last_seq = c.last_seq + EXCLUDED.last_seq
	RETURNING topic, aggregate_type, aggregate_id, last_seq),
inserted AS (INSERT INTO "outbox_events" (event_id, event_name, event_version, topic, aggregate_type, aggregate_id,
		payload, headers, readable_from, aggregate_seq)
	SELECT m.event_id, m.event_name, m.event_version, m.topic, m.aggregate_type, m.aggregate_id, m.payload,
		CASE WHEN jsonb_typeof(m.headers) = 'object' THEN m.headers ELSE '{}'::jsonb END || jsonb_build_object('outbox_deliver_at',
			to_char(m.deliver_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
		m.readable_from, n.last_seq - c.n + row_number() OVER (PARTITION BY m.topic, m.aggregate_type, m.aggregate_id ORDER BY m.deliver_at, m.id)
	FROM moved m JOIN counts c USING (topic, aggregate_type, aggregate_id) JOIN numbered n USING (topic, aggregate_type, aggregate_id) ORDER BY m.deliver_at, m.id RETURNING 1)
SELECT (SELECT got FROM lock), (SELECT count(*) FROM inserted),
	(SELECT count(*) FROM (SELECT pg_notify('outbox_events', '') FROM inserted LIMIT 1) x)
