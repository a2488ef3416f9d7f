-- move/write-letter
INSERT INTO "outbox_dead_letters" (event_id, source, event_name,
		event_version, topic, aggregate_type, aggregate_id, aggregate_seq, payload, headers, reason, attempts, created_at)
		SELECT $1::uuid, 'relay', $2, $3, $4, $5, $6, $11, $7, $8::jsonb, $9, $10, now()
		WHERE $1::uuid IS NULL OR NOT EXISTS (SELECT 1 FROM "outbox_dead_letters"
			WHERE (event_id = $1::uuid OR retried_event_id = $1::uuid) AND source = 'relay')
