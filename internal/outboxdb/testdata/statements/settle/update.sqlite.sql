-- settle/update
UPDATE "outbox_consumer_positions" SET last_seq = ?2, held_seq = ?3, held_event_id = ?4,
			held_at = CASE WHEN ?3 IS NULL THEN NULL WHEN ?3 IS held_seq THEN held_at ELSE strftime('%Y-%m-%d %H:%M:%f', 'now') END,
			waiting_since = CASE WHEN ?2 = last_seq THEN waiting_since WHEN waiting_seq > ?2 THEN strftime('%Y-%m-%d %H:%M:%f', 'now') END,
			waiting_seq = CASE WHEN waiting_seq > ?2 THEN waiting_seq END,
			updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
		WHERE id = ?1
