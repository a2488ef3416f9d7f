-- emit/counter-lock
SELECT last_seq FROM `outbox_aggregate_sequences` WHERE topic = ? AND aggregate_type = ? AND aggregate_id = ? FOR UPDATE
