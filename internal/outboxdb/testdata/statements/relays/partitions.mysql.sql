-- relays/partitions
SELECT COUNT(*) FROM `outbox_events_relay_lease`
