-- settle/settle
WITH RECURSIVE pos AS (
		SELECT id, last_seq, held_seq, held_event_id FROM "outbox_consumer_positions"
		WHERE consumer = $1 AND topic = $2 AND aggregate_type = $3 AND aggregate_id = $4 FOR UPDATE),
	letters AS (
		SELECT aggregate_seq AS seq, event_id, discarded_at IS NOT NULL AS discarded, source = $1 AS own
		FROM "outbox_dead_letters"
		WHERE source IN ($1, 'relay') AND topic = $2 AND aggregate_type = $3 AND aggregate_id = $4
			AND aggregate_seq IS NOT NULL AND retried_at IS NULL),
	skipped (seq) AS (
		SELECT last_seq FROM pos
		UNION ALL
		SELECT s.seq + 1 FROM skipped s WHERE EXISTS (SELECT 1 FROM letters l WHERE l.seq = s.seq + 1 AND l.discarded)
			AND NOT EXISTS (SELECT 1 FROM letters l WHERE l.seq = s.seq + 1 AND l.own AND NOT l.discarded AND l.event_id IS NOT NULL)),
	moved AS (SELECT pos.*, (SELECT max(seq) FROM skipped) AS to_seq FROM pos),
	next AS (
		SELECT moved.id, l.seq, l.event_id FROM moved JOIN letters l
			ON l.seq = moved.to_seq + 1 AND l.own AND NOT l.discarded AND l.event_id IS NOT NULL
		ORDER BY l.event_id LIMIT 1),
	target AS (
		SELECT moved.id, moved.last_seq, moved.to_seq,
			CASE WHEN moved.to_seq = moved.last_seq AND moved.held_seq IS NOT NULL THEN moved.held_seq ELSE next.seq END AS held_seq,
			CASE WHEN moved.to_seq = moved.last_seq AND moved.held_seq IS NOT NULL THEN moved.held_event_id ELSE next.event_id END AS held_event_id
		FROM moved LEFT JOIN next ON next.id = moved.id),
	settled AS (
		UPDATE "outbox_consumer_positions" AS p SET last_seq = target.to_seq,
			held_seq = target.held_seq, held_event_id = target.held_event_id,
			held_at = CASE WHEN target.held_seq IS NULL THEN NULL
				WHEN target.held_seq IS NOT DISTINCT FROM p.held_seq THEN p.held_at ELSE now() END,
			waiting_since = CASE WHEN target.to_seq = p.last_seq THEN p.waiting_since
				WHEN p.waiting_seq > target.to_seq THEN now() END,
			waiting_seq = CASE WHEN p.waiting_seq > target.to_seq THEN p.waiting_seq END,
			updated_at = now()
		FROM target
		WHERE p.id = target.id AND (target.to_seq <> p.last_seq OR target.held_seq IS DISTINCT FROM p.held_seq
			OR target.held_event_id IS DISTINCT FROM p.held_event_id)
		RETURNING p.consumer, p.topic, p.aggregate_type, p.aggregate_id, p.last_seq, p.held_seq, p.waiting_seq,
			target.last_seq AS was)
	SELECT last_seq, coalesce(held_seq, 0), true FROM settled
		WHERE was = last_seq OR waiting_seq IS NULL OR pg_notify('outbox_consumer_positions', json_build_object('schema', current_schema(), 'consumer', settled.consumer, 'topic', settled.topic, 'aggregate_type', settled.aggregate_type, 'aggregate_id', settled.aggregate_id, 'last_seq', settled.last_seq, 'waiting_seq', settled.waiting_seq)::text) IS NOT NULL
	UNION ALL
	SELECT last_seq, coalesce(held_seq, 0), false FROM pos WHERE NOT EXISTS (SELECT 1 FROM settled)
