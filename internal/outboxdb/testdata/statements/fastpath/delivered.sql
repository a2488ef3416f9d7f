-- fastpath/delivered
UPDATE "outbox_events" SET delivered_at = now()
	FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async WHERE id = ANY($1)
