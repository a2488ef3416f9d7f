-- poll/partitions-free
SELECT id FROM `outbox_events_relay_lease` WHERE `until` < UTC_TIMESTAMP(6)
		ORDER BY id LIMIT ?1 FOR UPDATE SKIP LOCKED
