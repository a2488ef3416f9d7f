-- order/lock-position-create
INSERT INTO `outbox_consumer_positions` (consumer, topic, aggregate_type, aggregate_id, last_seq, updated_at)
		VALUES (?1, ?2, ?3, ?4, 0, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE consumer = consumer
