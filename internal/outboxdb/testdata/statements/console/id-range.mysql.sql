-- console/id-range
SELECT MIN(id), MAX(id) FROM `outbox_events`
