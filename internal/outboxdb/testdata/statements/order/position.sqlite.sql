-- order/position
SELECT last_seq, held_seq IS NOT NULL, (julianday('now') - julianday(waiting_since)) * 86400.0, waiting_seq
		FROM "outbox_consumer_positions" WHERE consumer = ?1 AND topic = ?2 AND aggregate_type = ?3 AND aggregate_id = ?4
