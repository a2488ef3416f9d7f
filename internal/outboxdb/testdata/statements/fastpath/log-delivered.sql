-- fastpath/log-delivered
INSERT INTO "outbox_events_delivered" (id)
	SELECT unnest($1::bigint[]) FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async
	ON CONFLICT DO NOTHING
