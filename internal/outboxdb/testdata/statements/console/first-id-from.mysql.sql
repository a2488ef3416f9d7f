-- console/first-id-from
SELECT id, created_at FROM `outbox_events` WHERE id >= ?1 ORDER BY id LIMIT 1
