-- console/consumers
SELECT names.consumer, COALESCE(recent.n, 0), recent.last
		FROM (SELECT consumer FROM `outbox_processed_events` GROUP BY consumer ORDER BY consumer LIMIT 1000) names
		LEFT JOIN (SELECT consumer, COUNT(*) AS n, MAX(processed_at) AS last FROM `outbox_processed_events`
			WHERE processed_at > UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE GROUP BY consumer) recent ON recent.consumer = names.consumer
		ORDER BY names.consumer
