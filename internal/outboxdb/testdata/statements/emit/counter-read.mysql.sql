-- emit/counter-read
SELECT 0, topic, aggregate_type, aggregate_id FROM `outbox_aggregate_sequences` WHERE
