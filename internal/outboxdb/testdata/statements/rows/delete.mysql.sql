-- rows/delete
DELETE FROM `outbox_events` WHERE id = ?1
