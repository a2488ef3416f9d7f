-- order/record-retried
INSERT INTO "outbox_processed_events" (consumer, event_id, event_name, attempts)
		SELECT $1::text, $2::uuid, $3::text, $4::bigint
		WHERE EXISTS (SELECT 1 FROM "outbox_dead_letters" WHERE retried_event_id = $2::uuid AND source = $1::text)
		ON CONFLICT (consumer, event_id) DO NOTHING
