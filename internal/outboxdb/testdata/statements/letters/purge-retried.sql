-- letters/purge-retried
DELETE FROM "outbox_dead_letters" WHERE id IN (
		SELECT id FROM "outbox_dead_letters" WHERE "retried_at" < $1 ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)
