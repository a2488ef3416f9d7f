-- console/id-range
SELECT min(id), max(id) FROM "outbox_events"
