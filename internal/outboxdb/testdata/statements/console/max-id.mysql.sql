-- console/max-id
SELECT MAX(id) FROM `outbox_events`
