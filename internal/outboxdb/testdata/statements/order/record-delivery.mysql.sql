-- order/record-delivery
INSERT INTO `outbox_processed_events` (consumer, event_id, event_name, attempts)
		SELECT ?1, ?2, ?3, ?4 FROM DUAL
		WHERE NOT EXISTS (SELECT 1 FROM `outbox_dead_letters` WHERE event_id = ?2 AND source = ?1) ON DUPLICATE KEY UPDATE consumer = consumer
