-- order/record-processed
INSERT INTO `outbox_processed_events` (consumer, event_id, event_name, attempts)
		VALUES (?1, ?2, ?3, ?4) ON DUPLICATE KEY UPDATE consumer = consumer
