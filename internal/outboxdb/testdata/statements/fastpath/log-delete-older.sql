-- fastpath/log-delete-older
DELETE FROM "outbox_events" WHERE id IN (SELECT o.id FROM "outbox_events" o
	WHERE o.created_at < $1 AND o.delivered_at IS NULL AND (EXISTS (SELECT 1 FROM "outbox_events_delivered" dl WHERE dl.id = o.id) OR coalesce(o.id <= (SELECT df.upto FROM "outbox_events_delivered_to" df) AND pg_visible_in_snapshot(o.transaction_id, (SELECT df.snap FROM "outbox_events_delivered_to" df)), false))
	ORDER BY o.id LIMIT $2 FOR UPDATE OF o SKIP LOCKED)
