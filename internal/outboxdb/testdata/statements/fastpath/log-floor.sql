-- fastpath/log-floor
SELECT upto, pg_snapshot_xmax(snap)::text, array_to_string(ARRAY(SELECT pg_snapshot_xip(snap)), ',')
	FROM "outbox_events_delivered_to"
