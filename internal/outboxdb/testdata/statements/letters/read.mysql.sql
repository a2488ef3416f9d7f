-- letters/read
SELECT id, coalesce(retried_event_id, event_id), source, coalesce(event_name, ''),
	coalesce(event_version, 0), coalesce(topic, ''), coalesce(aggregate_type, ''), coalesce(aggregate_id, ''),
	coalesce(aggregate_seq, 0), payload, headers, reason, attempts, created_at, retried_at, discarded_at,
	coalesce(discard_note, '') FROM `outbox_dead_letters` WHERE id = ?1
