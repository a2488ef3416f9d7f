-- console/consumers
WITH RECURSIVE names AS (
			(SELECT consumer FROM "outbox_processed_events" ORDER BY consumer LIMIT 1)
			UNION ALL
			SELECT (SELECT p.consumer FROM "outbox_processed_events" p WHERE p.consumer > names.consumer ORDER BY p.consumer LIMIT 1)
			FROM names WHERE names.consumer IS NOT NULL
		), recent AS (
			SELECT consumer, count(*) AS n, max(processed_at) AS last FROM "outbox_processed_events"
			WHERE processed_at > now() - interval '1 minute' GROUP BY consumer
		)
		SELECT names.consumer, coalesce(recent.n, 0), recent.last FROM names LEFT JOIN recent USING (consumer)
		WHERE names.consumer IS NOT NULL ORDER BY names.consumer LIMIT 1000
