-- compatpath/ack
UPDATE (SELECT j.id FROM JSON_TABLE(?1, '$[*]' COLUMNS (id BIGINT PATH '$')) j) d STRAIGHT_JOIN `outbox_events` o FORCE INDEX (PRIMARY) ON o.id = d.id
		LEFT JOIN `outbox_events_relay_offsets` g ON g.consumer_group = ?2
		SET o.delivered_at = COALESCE(o.delivered_at, UTC_TIMESTAMP(6)), g.offset_acked = ?3, g.offset_consumed = ?3
