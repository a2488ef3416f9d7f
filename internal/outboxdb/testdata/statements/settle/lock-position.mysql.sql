-- settle/lock-position
SELECT id FROM `outbox_consumer_positions`
		WHERE consumer = ?1 AND topic = ?2 AND aggregate_type = ?3 AND aggregate_id = ?4 FOR UPDATE
