-- compatpath/select
SELECT id, event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers,
		COALESCE(readable_from, 0), COALESCE(aggregate_seq, 0), created_at
		FROM `outbox_events` WHERE delivered_at IS NULL AND id > (SELECT COALESCE((SELECT 0 FROM `outbox_events_relay_offsets` WHERE consumer_group = ?1 FOR UPDATE), 0))
		ORDER BY id LIMIT 100
