-- relays/partitions
SELECT count(DISTINCT partition) FROM "outbox_events_partitions"
