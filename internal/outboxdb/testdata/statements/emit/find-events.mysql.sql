-- emit/find-events
SELECT 1, event_id, '', '' FROM `outbox_events` WHERE event_id IN (?) LIMIT 1
