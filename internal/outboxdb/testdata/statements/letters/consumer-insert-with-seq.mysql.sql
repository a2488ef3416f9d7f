-- letters/consumer-insert-with-seq
INSERT INTO `outbox_dead_letters` (event_id, source, event_name, event_version, topic,
		aggregate_type, aggregate_id, payload, headers, reason, attempts, aggregate_seq)
		SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12 FROM DUAL
		WHERE ?1 IS NULL OR NOT EXISTS (SELECT 1 FROM `outbox_dead_letters` WHERE event_id = ?1 AND source = ?2)
