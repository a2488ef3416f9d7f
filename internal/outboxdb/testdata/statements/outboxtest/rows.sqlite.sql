-- outboxtest/rows
SELECT event_id, event_name, event_version, topic, aggregate_id,
			delivered_at IS NOT NULL, attempts, COALESCE(last_error, ''), available_at
		FROM "outbox_events" WHERE delivered_at IS NOT NULL OR attempts > 0
			OR julianday(available_at) <= julianday(?1) ORDER BY id
