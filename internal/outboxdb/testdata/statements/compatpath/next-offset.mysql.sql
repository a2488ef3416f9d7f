-- compatpath/next-offset
SELECT COALESCE((SELECT 0 FROM `outbox_events_relay_offsets` WHERE consumer_group = ?1 FOR UPDATE), 0)
