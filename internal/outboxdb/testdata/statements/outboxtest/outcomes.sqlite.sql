-- outboxtest/outcomes
SELECT consumer, event_id, attempts, true, '' FROM "outbox_processed_events"
		UNION ALL SELECT source, event_id, attempts, false, reason FROM "outbox_dead_letters"
			WHERE source <> 'relay' AND event_id IS NOT NULL
