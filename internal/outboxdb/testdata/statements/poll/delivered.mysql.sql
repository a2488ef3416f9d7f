-- poll/delivered
UPDATE (SELECT j.id FROM JSON_TABLE(?1, '$[*]' COLUMNS (id BIGINT PATH '$')) j) d STRAIGHT_JOIN `outbox_events` o FORCE INDEX (PRIMARY) ON o.id = d.id SET o.delivered_at = UTC_TIMESTAMP(6)
