-- poll/pending-in
SELECT id, event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload, headers,
		COALESCE(readable_from, 0), COALESCE(aggregate_seq, 0), created_at, attempts,
		GREATEST(0, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), available_at) DIV 1000)
		FROM `outbox_events` WHERE delivered_at IS NULL AND id > ?1 AND FIND_IN_SET(CRC32(CONCAT(COALESCE(aggregate_type, ''), CHAR(31), COALESCE(aggregate_id, ''))) % ?3, ?4) ORDER BY id LIMIT ?2
