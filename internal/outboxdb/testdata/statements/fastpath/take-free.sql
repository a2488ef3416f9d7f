-- fastpath/take-free
UPDATE "outbox_events_partitions" SET relay = $2, until = now() + $3 * interval '1 millisecond'
	WHERE topic = $1 AND partition IN (SELECT partition FROM "outbox_events_partitions"
		WHERE topic = $1 AND (relay = '' OR until < now()) ORDER BY partition LIMIT $4)
	RETURNING partition
