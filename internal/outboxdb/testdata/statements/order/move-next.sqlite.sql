-- order/move-next
UPDATE "outbox_consumer_positions" SET last_seq = ?5,
			waiting_since = CASE WHEN waiting_seq > ?5 THEN strftime('%Y-%m-%d %H:%M:%f', 'now') END,
			waiting_seq = CASE WHEN waiting_seq > ?5 THEN waiting_seq END,
			held_event_id = CASE WHEN held_seq = ?5 THEN NULL ELSE held_event_id END,
			held_at = CASE WHEN held_seq = ?5 THEN NULL ELSE held_at END,
			held_seq = CASE WHEN held_seq = ?5 THEN NULL ELSE held_seq END,
			updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
		WHERE consumer = ?1 AND topic = ?2 AND aggregate_type = ?3 AND aggregate_id = ?4
			AND last_seq = ?5 - 1 AND held_seq IS NULL
