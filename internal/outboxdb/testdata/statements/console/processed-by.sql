-- console/processed-by
WITH RECURSIVE names AS (
			(SELECT consumer FROM "outbox_processed_events" ORDER BY consumer LIMIT 1)
			UNION ALL
			SELECT (SELECT p.consumer FROM "outbox_processed_events" p WHERE p.consumer > names.consumer ORDER BY p.consumer LIMIT 1)
			FROM names WHERE names.consumer IS NOT NULL
		)
		SELECT consumer, processed_at, attempts FROM "outbox_processed_events"
		WHERE consumer = ANY (ARRAY(SELECT consumer FROM names WHERE consumer IS NOT NULL)) AND event_id = $1
		ORDER BY processed_at
