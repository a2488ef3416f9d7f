-- outboxtest/relay-letters
SELECT COALESCE(event_id, retried_event_id), COALESCE(event_name, ''),
			COALESCE(event_version, 0), COALESCE(topic, ''), COALESCE(aggregate_id, ''), attempts, reason
		FROM `outbox_dead_letters` WHERE source = 'relay' ORDER BY id
