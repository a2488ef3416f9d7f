-- lag/walk-bounds
SELECT COALESCE(MIN(id), 0), COUNT(*) FROM (SELECT id FROM `outbox_events` WHERE id < ?1 ORDER BY id DESC LIMIT ?2) w
