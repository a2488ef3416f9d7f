-- poll/member-beat
INSERT INTO `outbox_events_relay_members` (holder, `until`)
		VALUES (?1, UTC_TIMESTAMP(6) + INTERVAL ?2 * 1000 MICROSECOND)
		ON DUPLICATE KEY UPDATE `until` = VALUES(`until`)
