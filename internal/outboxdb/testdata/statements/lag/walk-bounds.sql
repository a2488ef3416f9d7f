-- lag/walk-bounds
SELECT coalesce(min(id), 0), count(*) FROM (SELECT id FROM "outbox_events" WHERE id < $1 ORDER BY id DESC LIMIT $2) w
