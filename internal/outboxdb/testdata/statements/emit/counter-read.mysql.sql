-- emit/counter-read
SELECT topic, aggregate_type, aggregate_id FROM `outbox_aggregate_sequences` WHERE
