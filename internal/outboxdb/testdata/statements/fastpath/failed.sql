-- fastpath/failed
UPDATE "outbox_events" SET attempts = attempts + $2,
	available_at = now() + $3 * interval '1 millisecond', last_error = $4 WHERE id = $1
