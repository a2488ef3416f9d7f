-- poll/failed
UPDATE "outbox_events" SET attempts = ?2,
		available_at = strftime('%Y-%m-%d %H:%M:%f', 'now', printf('+%.3f seconds', ?3 / 1000.0)), last_error = ?4 WHERE id = ?1
