-- console/newest-id
SELECT coalesce(max(id), 0) + 1 FROM "outbox_events"
