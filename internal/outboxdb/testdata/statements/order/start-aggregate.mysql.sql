-- order/start-aggregate
UPDATE `outbox_consumer_positions` SET last_seq = LAST_INSERT_ID(waiting_seq) - 1, updated_at = UTC_TIMESTAMP(6)
			WHERE consumer = ?1 AND topic = ?2 AND aggregate_type = ?3 AND aggregate_id = ?4
				AND last_seq = 0 AND held_seq IS NULL AND waiting_seq > 1 AND waiting_since <= UTC_TIMESTAMP(6) - INTERVAL CAST(?5 * 1000000 AS SIGNED) MICROSECOND
