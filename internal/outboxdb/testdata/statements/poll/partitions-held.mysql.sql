-- poll/partitions-held
SELECT id FROM `outbox_events_relay_lease` WHERE holder = ?1 ORDER BY id
