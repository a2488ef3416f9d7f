-- letters/mark-retried
UPDATE `outbox_dead_letters` SET retried_at = ?2,
		retried_event_id = event_id, event_id = NULL WHERE id = ?1
