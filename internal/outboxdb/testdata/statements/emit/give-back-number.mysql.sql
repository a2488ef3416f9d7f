-- emit/give-back-number
UPDATE `outbox_aggregate_sequences` SET last_seq = last_seq - 1
				WHERE topic = ? AND aggregate_type = ? AND aggregate_id = ?
