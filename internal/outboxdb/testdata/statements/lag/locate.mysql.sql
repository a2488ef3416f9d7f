-- lag/locate
SELECT c.consumer, c.topic, COUNT(*), MIN(o.created_at)
		FROM `outbox_events` o JOIN JSON_TABLE(?3, '$[*]' COLUMNS (
			consumer VARCHAR(191) PATH '$[0]', topic VARCHAR(191) PATH '$[1]')) c ON c.topic = o.topic
		WHERE o.id >= ?1 AND o.id < ?2 AND o.aggregate_seq > COALESCE((SELECT p.last_seq FROM `outbox_consumer_positions` p
			WHERE p.consumer = c.consumer AND p.topic = o.topic AND p.aggregate_type = o.aggregate_type
			AND p.aggregate_id = o.aggregate_id), 0)
		GROUP BY c.consumer, c.topic
