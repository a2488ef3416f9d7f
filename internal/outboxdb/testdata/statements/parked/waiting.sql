-- parked/waiting
SELECT EXISTS (SELECT 1 FROM "outbox_events" o WHERE o.delivered_at IS NULL) OR EXISTS (SELECT 1 FROM "outbox_scheduled_events" s
		WHERE s.cancelled_at IS NULL AND s.deliver_at <= clock_timestamp()
		AND NOT EXISTS (SELECT 1 FROM "outbox_events" d WHERE d.event_id = s.event_id))
