-- retention/delete-older
DELETE FROM "outbox_events" WHERE id IN (
		SELECT id FROM "outbox_events" WHERE "delivered_at" < $1 ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)
