-- poll/partitions-renew
UPDATE `outbox_events_relay_lease` SET `until` = UTC_TIMESTAMP(6) + INTERVAL ?2 * 1000 MICROSECOND
		WHERE holder = ?1
