-- promote/next-due
SELECT CAST(ROUND((julianday(s.deliver_at) - julianday('now')) * 86400000000.0) AS INTEGER)
		FROM "outbox_scheduled_events" s WHERE s.cancelled_at IS NULL
		AND NOT EXISTS (SELECT 1 FROM "outbox_events" o WHERE o.event_id = s.event_id)
		ORDER BY julianday(s.deliver_at), s.id LIMIT 1
