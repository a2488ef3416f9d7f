-- scheduled/delete-cancelled
DELETE FROM `outbox_scheduled_events` WHERE `cancelled_at` < ?1 ORDER BY id LIMIT ?2
