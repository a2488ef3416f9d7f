-- fastpath/renew
UPDATE "outbox_events_partitions" SET until = now() + $3 * interval '1 millisecond'
	WHERE topic = $1 AND relay = $2 RETURNING partition
