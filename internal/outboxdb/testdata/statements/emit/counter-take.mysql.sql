-- emit/counter-take
UPDATE `outbox_aggregate_sequences` SET last_seq = LAST_INSERT_ID(last_seq + ?)
			WHERE topic = ? AND aggregate_type = ? AND aggregate_id = ?
