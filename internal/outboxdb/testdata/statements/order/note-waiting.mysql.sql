-- order/note-waiting
INSERT INTO `outbox_consumer_positions`
		(consumer, topic, aggregate_type, aggregate_id, last_seq, waiting_since, waiting_seq, updated_at)
		VALUES (?1, ?2, ?3, ?4, 0, CASE WHEN ?5 > 1 THEN UTC_TIMESTAMP(6) END, CASE WHEN ?5 > 1 THEN ?5 END, UTC_TIMESTAMP(6))
		ON DUPLICATE KEY UPDATE
			waiting_since = CASE WHEN ?5 > last_seq + 1 AND held_seq IS NULL THEN COALESCE(waiting_since, UTC_TIMESTAMP(6)) ELSE waiting_since END,
			waiting_seq = CASE WHEN ?5 > last_seq + 1 AND held_seq IS NULL THEN COALESCE(LEAST(waiting_seq, ?5), ?5) ELSE waiting_seq END
