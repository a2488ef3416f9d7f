-- console/processed-by
SELECT p.consumer, p.processed_at, p.attempts
		FROM (SELECT consumer FROM `outbox_processed_events` GROUP BY consumer) names
		JOIN `outbox_processed_events` p ON p.consumer = names.consumer AND p.event_id = ?1
		ORDER BY p.processed_at
