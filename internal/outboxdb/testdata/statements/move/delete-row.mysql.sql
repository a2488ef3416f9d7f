-- move/delete-row
DELETE FROM `outbox_events` WHERE id = ?1
