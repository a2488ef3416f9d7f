-- settle/update
UPDATE `outbox_consumer_positions` SET
			held_at = CASE WHEN ?3 IS NULL THEN NULL WHEN ?3 <=> held_seq THEN held_at ELSE UTC_TIMESTAMP(6) END,
			waiting_since = CASE WHEN ?2 = last_seq THEN waiting_since WHEN waiting_seq > ?2 THEN UTC_TIMESTAMP(6) END,
			waiting_seq = CASE WHEN waiting_seq > ?2 THEN waiting_seq END,
			last_seq = ?2, held_seq = ?3, held_event_id = ?4, updated_at = UTC_TIMESTAMP(6)
		WHERE id = ?1
