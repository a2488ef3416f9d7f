-- letters/list-filtered
SELECT id, coalesce(retried_event_id, event_id), source, coalesce(event_name, ''),
	coalesce(event_version, 0), coalesce(topic, ''), coalesce(aggregate_type, ''), coalesce(aggregate_id, ''),
	coalesce(aggregate_seq, 0), payload, headers, reason, attempts, created_at, retried_at, discarded_at,
	coalesce(discard_note, '') FROM `outbox_dead_letters` WHERE source = ?1 AND event_name = ?2 AND LOCATE(?3, reason) > 0 AND created_at >= ?4 AND created_at < ?5 AND retried_at IS NULL AND discarded_at IS NULL ORDER BY id DESC LIMIT 100
