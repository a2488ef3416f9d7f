-- emit/cancel-find
SELECT EXISTS (SELECT 1 FROM `outbox_scheduled_events` WHERE event_id = ?1), EXISTS (SELECT 1 FROM `outbox_events` WHERE event_id = ?1)
