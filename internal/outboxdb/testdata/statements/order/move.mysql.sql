-- order/move
UPDATE `outbox_consumer_positions` SET last_seq = ?2,
			waiting_since = CASE WHEN waiting_seq > ?2 THEN UTC_TIMESTAMP(6) END,
			waiting_seq = CASE WHEN waiting_seq > ?2 THEN waiting_seq END,
			held_event_id = CASE WHEN held_seq = ?2 THEN NULL ELSE held_event_id END,
			held_at = CASE WHEN held_seq = ?2 THEN NULL ELSE held_at END,
			held_seq = CASE WHEN held_seq = ?2 THEN NULL ELSE held_seq END,
			updated_at = UTC_TIMESTAMP(6) WHERE id = ?1
