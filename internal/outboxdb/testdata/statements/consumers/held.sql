-- consumers/held
SELECT c.consumer, c.n, h.topic, h.aggregate_type, h.aggregate_id, h.held_seq,
			coalesce(h.held_event_id::text, ''), coalesce(h.held_at, h.updated_at)
		FROM (SELECT consumer, count(*) AS n FROM "outbox_consumer_positions" WHERE held_seq IS NOT NULL GROUP BY consumer) c
		CROSS JOIN LATERAL (SELECT * FROM "outbox_consumer_positions" p WHERE p.consumer = c.consumer AND p.held_seq IS NOT NULL
			ORDER BY coalesce(p.held_at, p.updated_at), p.id LIMIT $1) h
		ORDER BY c.consumer, coalesce(h.held_at, h.updated_at), h.id
