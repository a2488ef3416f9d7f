-- fastpath/free-partitions
UPDATE "outbox_events_partitions" SET relay = '', until = '-infinity'
	WHERE topic = $1 AND relay = ANY($2)
