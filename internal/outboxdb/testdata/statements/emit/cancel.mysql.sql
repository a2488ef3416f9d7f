-- emit/cancel
UPDATE `outbox_scheduled_events` SET cancelled_at = UTC_TIMESTAMP(6) WHERE event_id = ?1 AND cancelled_at IS NULL
