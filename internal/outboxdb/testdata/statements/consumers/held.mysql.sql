-- consumers/held
SELECT consumer, n, topic, aggregate_type, aggregate_id, held_seq, COALESCE(held_event_id, ''), since
		FROM (SELECT p.consumer, COUNT(*) OVER (PARTITION BY p.consumer) AS n, p.topic, p.aggregate_type,
				p.aggregate_id, p.held_seq, p.held_event_id, COALESCE(p.held_at, p.updated_at) AS since, p.id,
				ROW_NUMBER() OVER (PARTITION BY p.consumer ORDER BY COALESCE(p.held_at, p.updated_at), p.id) AS rk
			FROM `outbox_consumer_positions` p WHERE p.held_seq IS NOT NULL) h
		WHERE rk <= ?1 ORDER BY consumer, since, id
