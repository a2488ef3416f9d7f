-- poll/partitions-take
UPDATE `outbox_events_relay_lease` SET holder = ?2, `until` = UTC_TIMESTAMP(6) + INTERVAL ?3 * 1000 MICROSECOND
		WHERE FIND_IN_SET(id, ?1)
