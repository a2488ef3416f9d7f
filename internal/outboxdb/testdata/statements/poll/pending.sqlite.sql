-- poll/pending
SELECT id, event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers,
		COALESCE(readable_from, 0), COALESCE(aggregate_seq, 0), created_at, attempts,
		MAX(0, CAST(ROUND((julianday(available_at) - julianday('now')) * 86400000.0) AS INTEGER))
		FROM "outbox_events" WHERE delivered_at IS NULL AND id > ?1 ORDER BY id LIMIT ?2
