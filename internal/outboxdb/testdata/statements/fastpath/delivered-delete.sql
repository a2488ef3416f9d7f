-- fastpath/delivered-delete
DELETE FROM "outbox_events"
	USING (SELECT set_config('synchronous_commit', 'off', true)) AS async WHERE id = ANY($1)
