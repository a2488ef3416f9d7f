-- emit/find-events
SELECT event_id FROM `outbox_events` WHERE event_id IN (?) LIMIT 1
