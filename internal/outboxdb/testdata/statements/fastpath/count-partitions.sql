-- fastpath/count-partitions
SELECT count(*) FROM "outbox_events_partitions" WHERE topic = $1
