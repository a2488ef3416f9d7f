-- move/write-letter
INSERT INTO "outbox_dead_letters" (event_id, source, event_name,
		event_version, topic, aggregate_type, aggregate_id, aggregate_seq, payload, headers, reason, attempts, created_at)
		SELECT ?1, 'relay', ?2, ?3, ?4, ?5, ?6, ?11, ?7, ?8, ?9, ?10, strftime('%Y-%m-%d %H:%M:%f', 'now')
		WHERE ?1 IS NULL OR NOT EXISTS (SELECT 1 FROM "outbox_dead_letters"
			WHERE (event_id = ?1 OR retried_event_id = ?1) AND source = 'relay')
