-- poll/delivered-delete
DELETE FROM "outbox_events" WHERE id IN (SELECT value FROM json_each(?1))
