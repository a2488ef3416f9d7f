-- scheduled/delete-cancelled
DELETE FROM "outbox_scheduled_events" WHERE id IN (SELECT id FROM "outbox_scheduled_events"
		WHERE cancelled_at < $1 ORDER BY cancelled_at LIMIT $2 FOR UPDATE SKIP LOCKED)
