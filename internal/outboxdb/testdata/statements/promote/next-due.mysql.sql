-- promote/next-due
SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), s.deliver_at)
		FROM `outbox_scheduled_events` s WHERE s.cancelled_at IS NULL
		AND NOT EXISTS (SELECT 1 FROM `outbox_events` o WHERE o.event_id = s.event_id)
		ORDER BY s.deliver_at, s.id LIMIT 1
