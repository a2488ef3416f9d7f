-- scheduled/cancelled
SELECT COUNT(*) FROM (SELECT 1 FROM `outbox_scheduled_events`
		WHERE cancelled_at IS NOT NULL LIMIT ?1) c
