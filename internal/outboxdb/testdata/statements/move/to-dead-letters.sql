-- move/to-dead-letters
WITH moved AS (DELETE FROM "outbox_events" WHERE id = $1 RETURNING *)
		INSERT INTO "outbox_dead_letters" (event_id, source, event_name, event_version, topic,
			aggregate_type, aggregate_id, aggregate_seq, payload, headers, reason, attempts, created_at)
		SELECT event_id, 'relay', event_name, event_version, topic, aggregate_type, aggregate_id, aggregate_seq,
			convert_to(payload::text, 'UTF8'), headers, $2, GREATEST(attempts, $3), now()
		FROM moved
