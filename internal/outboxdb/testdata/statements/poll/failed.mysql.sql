-- poll/failed
UPDATE `outbox_events` SET attempts = ?2,
		available_at = UTC_TIMESTAMP(6) + INTERVAL ?3 * 1000 MICROSECOND, last_error = ?4 WHERE id = ?1
