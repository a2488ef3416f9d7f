-- scheduled/of-event
SELECT id, event_id, event_name, event_version, topic, aggregate_type,
		aggregate_id, payload, headers, COALESCE(readable_from, 0), deliver_at, created_at, cancelled_at
		FROM `outbox_scheduled_events` WHERE event_id = ?1
