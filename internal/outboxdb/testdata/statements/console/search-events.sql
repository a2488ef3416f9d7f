-- console/search-events
SELECT id, event_id, event_name, event_version, topic, aggregate_type, aggregate_id, created_at,
		delivered_at, o.delivered_at IS NOT NULL, attempts, coalesce(last_error, '') FROM "outbox_events" o ORDER BY id DESC LIMIT 51
