-- settle/positions-of
SELECT consumer FROM `outbox_consumer_positions`
		WHERE topic = ?1 AND aggregate_type = ?2 AND aggregate_id = ?3 ORDER BY consumer
