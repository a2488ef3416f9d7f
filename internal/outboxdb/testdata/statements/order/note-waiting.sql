-- order/note-waiting
INSERT INTO "outbox_consumer_positions" AS p
		(consumer, topic, aggregate_type, aggregate_id, last_seq, waiting_since, waiting_seq, updated_at)
		VALUES ($1, $2, $3, $4, 0, CASE WHEN $5::bigint > 1 THEN now() END, CASE WHEN $5::bigint > 1 THEN $5::bigint END, now())
		ON CONFLICT (consumer, topic, aggregate_type, aggregate_id) DO UPDATE
		SET waiting_since = CASE WHEN $5::bigint > p.last_seq + 1 AND p.held_seq IS NULL THEN COALESCE(p.waiting_since, now()) ELSE p.waiting_since END,
			waiting_seq = CASE WHEN $5::bigint > p.last_seq + 1 AND p.held_seq IS NULL THEN LEAST(p.waiting_seq, $5::bigint) ELSE p.waiting_seq END
		RETURNING p.last_seq, p.held_seq IS NOT NULL, EXTRACT(EPOCH FROM now() - p.waiting_since)::float8, p.waiting_seq
