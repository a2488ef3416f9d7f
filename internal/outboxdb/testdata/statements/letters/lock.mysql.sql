-- letters/lock
SELECT id, coalesce(retried_event_id, event_id), source, coalesce(event_name, ''),
	coalesce(event_version, 0), coalesce(topic, ''), coalesce(aggregate_type, ''), coalesce(aggregate_id, ''),
	coalesce(aggregate_seq, 0), payload, headers, reason, attempts, created_at, retried_at, discarded_at,
	coalesce(discard_note, '') FROM (SELECT j.lid FROM JSON_TABLE(?1, '$[*]' COLUMNS (lid BIGINT PATH '$')) j) d
		STRAIGHT_JOIN `outbox_dead_letters` FORCE INDEX (PRIMARY) ON id = d.lid ORDER BY id FOR UPDATE
