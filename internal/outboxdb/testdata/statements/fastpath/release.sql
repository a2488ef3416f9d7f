-- fastpath/release
UPDATE "outbox_events_partitions" SET relay = '', until = '-infinity'
	WHERE topic = $1 AND relay = $2 AND partition = ANY($3)
