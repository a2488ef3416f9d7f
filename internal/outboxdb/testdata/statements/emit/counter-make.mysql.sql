-- emit/counter-make
INSERT INTO `outbox_aggregate_sequences` (topic, aggregate_type, aggregate_id, last_seq) VALUES (?, ?, ?, ?)
			ON DUPLICATE KEY UPDATE last_seq = LAST_INSERT_ID(last_seq + VALUES(last_seq))
