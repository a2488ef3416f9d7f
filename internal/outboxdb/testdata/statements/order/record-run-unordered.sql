-- order/record-run-unordered
WITH v AS (SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::uuid[], $8::text[], $9::bool[], $10::bigint[])
			AS v(consumer, i, topic, aggregate_type, aggregate_id, seq, event_id, event_name, rec, attempts)),
		free AS (SELECT * FROM v WHERE NOT EXISTS (SELECT 1 FROM "outbox_dead_letters" d WHERE d.event_id = v.event_id AND d.source = v.consumer)),
		applied AS (SELECT i FROM free),
		done AS (
			INSERT INTO "outbox_processed_events" (consumer, event_id, event_name, attempts)
			SELECT v.consumer, v.event_id, v.event_name, v.attempts FROM v JOIN applied a ON a.i = v.i WHERE v.rec
			ORDER BY v.consumer, v.event_id
			ON CONFLICT (consumer, event_id) DO NOTHING
			RETURNING consumer, event_id)
		SELECT v.i, a.i IS NOT NULL, NOT v.rec OR EXISTS (SELECT 1 FROM done d WHERE d.consumer = v.consumer AND d.event_id = v.event_id)
		FROM v LEFT JOIN applied a ON a.i = v.i
