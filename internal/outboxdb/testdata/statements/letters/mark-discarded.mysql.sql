-- letters/mark-discarded
UPDATE `outbox_dead_letters` SET discarded_at = ?2, discard_note = ?3
		WHERE id = ?1
