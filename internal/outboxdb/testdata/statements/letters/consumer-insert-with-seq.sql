-- letters/consumer-insert-with-seq
INSERT INTO "outbox_dead_letters" (event_id, source, event_name, event_version, topic,
		aggregate_type, aggregate_id, payload, headers, reason, attempts, aggregate_seq)
		SELECT $1::uuid, $2::text, $3::text, $4::bigint, $5::text, $6::text, $7::text, $8::bytea, $9::jsonb, $10::text, $11::bigint, $12::bigint
		WHERE $1::uuid IS NULL OR NOT EXISTS (SELECT 1 FROM "outbox_dead_letters" WHERE event_id = $1::uuid AND source = $2::text)
