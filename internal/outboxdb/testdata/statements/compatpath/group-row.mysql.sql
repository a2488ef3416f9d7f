-- compatpath/group-row
INSERT INTO `outbox_events_relay_offsets` (consumer_group, offset_acked, offset_consumed)
		VALUES (?1, 0, 0) ON DUPLICATE KEY UPDATE consumer_group = consumer_group
