-- poll/partitions-give-all
UPDATE `outbox_events_relay_lease` SET `until` = '1970-01-01 00:00:01', holder = '' WHERE holder = ?1
