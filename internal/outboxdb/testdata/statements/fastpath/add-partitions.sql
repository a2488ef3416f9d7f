-- fastpath/add-partitions
INSERT INTO "outbox_events_partitions" (topic, partition)
	SELECT $1, g FROM generate_series(0, $2 - 1) g
