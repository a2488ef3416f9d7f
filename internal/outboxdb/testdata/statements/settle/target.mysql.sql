-- settle/target
WITH RECURSIVE pos AS (
		SELECT id, last_seq, held_seq, held_event_id FROM `outbox_consumer_positions`
		WHERE consumer = ?1 AND topic = ?2 AND aggregate_type = ?3 AND aggregate_id = ?4),
	letters AS (
		SELECT aggregate_seq AS seq, event_id, discarded_at IS NOT NULL AS discarded, source = ?1 AS own
		FROM `outbox_dead_letters`
		WHERE source IN (?1, 'relay') AND topic = ?2 AND aggregate_type = ?3 AND aggregate_id = ?4
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
		ORDER BY l.event_id LIMIT 1)
	SELECT moved.id, moved.last_seq, moved.to_seq,
		CASE WHEN moved.to_seq = moved.last_seq AND moved.held_seq IS NOT NULL THEN moved.held_seq ELSE next.seq END,
		CASE WHEN moved.to_seq = moved.last_seq AND moved.held_seq IS NOT NULL THEN moved.held_event_id ELSE next.event_id END,
		moved.held_seq, moved.held_event_id
	FROM moved LEFT JOIN next ON next.id = moved.id
