-- console/max-id
SELECT max(id) FROM "outbox_events"
