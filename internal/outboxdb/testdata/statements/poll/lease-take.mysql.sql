-- poll/lease-take
INSERT INTO `outbox_events_relay_lease` (id, holder, `until`)
		VALUES (1, ?1, UTC_TIMESTAMP(6) + INTERVAL ?2 * 1000 MICROSECOND)
		ON DUPLICATE KEY UPDATE
			holder = IF(holder = VALUES(holder) OR `until` < UTC_TIMESTAMP(6), VALUES(holder), holder),
			`until` = IF(holder = VALUES(holder), VALUES(`until`), `until`)
