-- order/position
SELECT last_seq, held_seq IS NOT NULL, TIMESTAMPDIFF(MICROSECOND, waiting_since, UTC_TIMESTAMP(6)) / 1000000, waiting_seq
		FROM `outbox_consumer_positions` WHERE consumer = ?1 AND topic = ?2 AND aggregate_type = ?3 AND aggregate_id = ?4
