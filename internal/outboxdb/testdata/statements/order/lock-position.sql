-- order/lock-position
INSERT INTO "outbox_consumer_positions" AS p
		(consumer, topic, aggregate_type, aggregate_id, last_seq, updated_at) VALUES ($1, $2, $3, $4, 0, now())
		ON CONFLICT (consumer, topic, aggregate_type, aggregate_id) DO UPDATE SET last_seq = p.last_seq
		RETURNING p.id, p.last_seq, p.held_seq, p.held_event_id, EXTRACT(EPOCH FROM now() - p.waiting_since)::float8,
			EXISTS (SELECT 1 FROM "outbox_dead_letters" WHERE event_id = $5 AND source = $1),
			CASE WHEN p.held_seq IS NOT NULL OR $6::bigint > p.last_seq + 1 THEN EXISTS (SELECT 1 FROM "outbox_dead_letters"
				WHERE source IN ($1, 'relay') AND topic = $2 AND aggregate_type = $3 AND aggregate_id = $4
					AND aggregate_seq = p.last_seq + 1 AND discarded_at IS NOT NULL AND retried_at IS NULL)
				AND NOT EXISTS (SELECT 1 FROM "outbox_dead_letters" WHERE source = $1 AND topic = $2
					AND aggregate_type = $3 AND aggregate_id = $4 AND aggregate_seq = p.last_seq + 1
					AND event_id IS NOT NULL AND discarded_at IS NULL AND retried_at IS NULL) ELSE false END
