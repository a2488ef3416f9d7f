-- promote/delete
DELETE FROM `outbox_scheduled_events` WHERE id = ?1
