-- fastpath/log-fold
WITH stamped AS (UPDATE "outbox_events" o SET delivered_at = now()
	WHERE o.delivered_at IS NULL AND (EXISTS (SELECT 1 FROM "outbox_events_delivered" dl WHERE dl.id = o.id) OR coalesce(o.id <= (SELECT df.upto FROM "outbox_events_delivered_to" df) AND pg_visible_in_snapshot(o.transaction_id, (SELECT df.snap FROM "outbox_events_delivered_to" df)), false)) RETURNING 1)
SELECT count(*) FROM stamped
