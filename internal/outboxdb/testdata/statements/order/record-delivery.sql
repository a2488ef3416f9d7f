-- order/record-delivery
INSERT INTO "outbox_processed_events" (consumer, event_id, event_name, attempts)
		SELECT $1::text, $2::uuid, $3::text, $4::bigint
		WHERE NOT EXISTS (SELECT 1 FROM "outbox_dead_letters" WHERE event_id = $2::uuid AND source = $1::text)
		ON CONFLICT (consumer, event_id) DO NOTHING
