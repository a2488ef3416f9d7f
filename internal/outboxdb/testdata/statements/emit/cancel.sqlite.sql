-- emit/cancel
UPDATE "outbox_scheduled_events" SET cancelled_at = CURRENT_TIMESTAMP WHERE event_id = ?1 AND cancelled_at IS NULL
