-- emit/give-back-number
UPDATE "outbox_aggregate_sequences" SET last_seq = last_seq - 1
				WHERE topic = ?1 AND aggregate_type = ?2 AND aggregate_id = ?3
