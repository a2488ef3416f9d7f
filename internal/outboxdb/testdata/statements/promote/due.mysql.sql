-- promote/due
SELECT s.id, s.event_id, s.event_name, s.event_version, s.topic, s.aggregate_type, s.aggregate_id, s.payload,
		s.headers, s.deliver_at, s.readable_from
		FROM `outbox_scheduled_events` s WHERE s.cancelled_at IS NULL AND s.deliver_at <= UTC_TIMESTAMP(6)
		AND NOT EXISTS (SELECT 1 FROM `outbox_events` o WHERE o.event_id = s.event_id)
		ORDER BY s.deliver_at, s.id LIMIT ?1 FOR UPDATE SKIP LOCKED
