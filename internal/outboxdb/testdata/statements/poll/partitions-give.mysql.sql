-- poll/partitions-give
UPDATE `outbox_events_relay_lease` SET `until` = '1970-01-01 00:00:01', holder = ''
		WHERE holder = ?1 AND FIND_IN_SET(id, ?2)
