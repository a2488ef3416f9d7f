-- order/note-waiting
INSERT INTO "outbox_consumer_positions"
		(consumer, topic, aggregate_type, aggregate_id, last_seq, waiting_since, waiting_seq, updated_at)
		VALUES (?1, ?2, ?3, ?4, 0, CASE WHEN ?5 > 1 THEN strftime('%Y-%m-%d %H:%M:%f', 'now') END, CASE WHEN ?5 > 1 THEN ?5 END, strftime('%Y-%m-%d %H:%M:%f', 'now'))
		ON CONFLICT (consumer, topic, aggregate_type, aggregate_id) DO UPDATE
		SET waiting_since = CASE WHEN ?5 > "outbox_consumer_positions".last_seq + 1 AND "outbox_consumer_positions".held_seq IS NULL THEN COALESCE("outbox_consumer_positions".waiting_since, strftime('%Y-%m-%d %H:%M:%f', 'now')) ELSE "outbox_consumer_positions".waiting_since END,
			waiting_seq = CASE WHEN ?5 > "outbox_consumer_positions".last_seq + 1 AND "outbox_consumer_positions".held_seq IS NULL THEN COALESCE(MIN("outbox_consumer_positions".waiting_seq, ?5), ?5) ELSE "outbox_consumer_positions".waiting_seq END
		RETURNING last_seq, held_seq IS NOT NULL, (julianday('now') - julianday(waiting_since)) * 86400.0, waiting_seq
