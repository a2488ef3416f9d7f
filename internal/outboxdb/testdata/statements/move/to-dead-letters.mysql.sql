-- move/to-dead-letters
INSERT INTO `outbox_dead_letters` (event_id, source, event_name, event_version, topic,
			aggregate_type, aggregate_id, aggregate_seq, payload, headers, reason, attempts, created_at)
		SELECT event_id, 'relay', event_name, event_version, topic, aggregate_type, aggregate_id, aggregate_seq,
			CAST(payload AS BINARY), headers, ?2, GREATEST(attempts, ?3), UTC_TIMESTAMP(6)
		FROM `outbox_events` WHERE id = ?1
