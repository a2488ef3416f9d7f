-- poll/partitions-seed
INSERT IGNORE INTO `outbox_events_relay_lease` (id, holder, `until`)
		SELECT d.id, '', '1970-01-01 00:00:01' FROM (SELECT j.id FROM JSON_TABLE(?1, '$[*]' COLUMNS (id BIGINT PATH '$')) j) d
